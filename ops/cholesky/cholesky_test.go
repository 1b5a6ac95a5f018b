package cholesky

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"metalcore/internal/core"
	tu "metalcore/tests/testutil"
)

// spd is a random symmetric positive-definite n x n matrix B Bᵀ/n + shift·I
// (row-major), rounded to dt.
func spd(rng *rand.Rand, n int, shift float64, dt core.DType) []float64 {
	b := make([]float64, n*n)
	for i := range b {
		b[i] = rng.NormFloat64()
	}
	a := make([]float64, n*n)
	for i := range n {
		for j := range i + 1 {
			var s float64
			for k := range n {
				s += b[i*n+k] * b[j*n+k]
			}
			s /= float64(n)
			if i == j {
				s += shift
			}
			a[i*n+j], a[j*n+i] = tu.Round(dt, s), tu.Round(dt, s)
		}
	}
	return a
}

// want is the float64 factor of each matrix of a (as upper says) and info.
func want(a []float64, batch, n int, upper bool) ([]float64, []float64) {
	var l, info []float64
	for b := range batch {
		f, k := RefCholesky(a[b*n*n:(b+1)*n*n], n)
		if upper {
			f = transposed(f, n)
		}
		l, info = append(l, f...), append(info, float64(k))
	}
	return l, info
}

func transposed(m []float64, n int) []float64 {
	t := make([]float64, n*n)
	for i := range n {
		for j := range n {
			t[j*n+i] = m[i*n+j]
		}
	}
	return t
}

func orders(b tu.Backend) []int {
	ns := []int{0, 1, 2, 3, 7, 16, 32, 33, 64}
	if b.DeviceType != core.DeviceMetal {
		ns = append(ns, 128)
	}
	return ns
}

// Every order, batch shape, triangle and dtype against float64, the other
// triangle of a poisoned with NaN (never read); outputs poisoned first.
func TestCholesky(t *testing.T) {
	tu.ForEachBackend(t, func(t *testing.T, b tu.Backend) {
		rng := tu.RNG(t)
		for _, dt := range tu.DTypes {
			for _, n := range orders(b) {
				for _, lead := range [][]int64{{}, {3}, {2, 2}} {
					for _, upper := range []bool{false, true} {
						what := fmt.Sprintf("%v n=%d batch %v upper %v", dt, n, lead, upper)
						batch := 1
						for _, d := range lead {
							batch *= int(d)
						}
						var vals []float64
						for range batch {
							vals = append(vals, spd(rng, n, 1, dt)...)
						}
						poisoned := append([]float64(nil), vals...)
						for m := range batch {
							for i := range n {
								for j := range n {
									if (upper && j < i) || (!upper && j > i) {
										poisoned[m*n*n+i*n+j] = math.NaN()
									}
								}
							}
						}
						shape := append(append([]int64(nil), lead...), int64(n), int64(n))
						a := b.New(dt, shape).Set(poisoned)
						l, info := b.New(dt, shape), b.New(core.I32, lead)
						require.NoError(t, Cholesky(a.Ptr(), upper, l.Ptr(), info.Ptr(), nil), what)
						wl, wi := want(vals, batch, n, upper)
						require.Equal(t, wi, info.Values(), what)
						// B Bᵀ/n + I has a condition number of a few at most:
						// the factor carries the input's rounding
						tu.CloseScaled(t, what, l.Values(), wl, 4*tu.Tol(dt), 0.05)
					}
				}
			}
		}
	})
}

// Matrices that are not positive-definite among ones that are: each gets
// its own info (the order of its first minor that is not), the others
// factor; a NaN is reported the same way; an ill-conditioned one (cond
// about 1e4) stays accurate to cond times float32's rounding.
func TestCholeskyMixedBatch(t *testing.T) {
	tu.ForEachBackend(t, func(t *testing.T, b tu.Backend) {
		rng := tu.RNG(t)
		const n = 24
		var vals []float64
		for m := range 5 {
			a := spd(rng, n, 1, core.F32)
			switch m {
			case 1: // indefinite from order 11 on
				a[10*n+10] = -50
			case 2: // a NaN below the diagonal
				a[7*n+3], a[3*n+7] = math.NaN(), math.NaN()
			case 3: // zero matrix: order 1 fails
				clear(a)
			case 4: // nearly singular: the smallest eigenvalue 1e-4 of about 1
				a = spd(rng, n, 1e-4, core.F32)
			}
			vals = append(vals, a...)
		}
		a := b.New(core.F32, []int64{5, n, n}).Set(vals)
		l, info := b.New(core.F32, []int64{5, n, n}), b.New(core.I32, []int64{5})
		require.NoError(t, Cholesky(a.Ptr(), false, l.Ptr(), info.Ptr(), nil))
		wl, wi := want(vals, 5, n, false)
		require.Equal(t, []float64{0, 11, wi[2], 1, 0}, info.Values())
		require.Greater(t, wi[2], 3.0) // the NaN row's minor, as float64 finds it
		got := l.Values()
		tu.CloseScaled(t, "positive-definite", got[:n*n], wl[:n*n], 1e-5, 0.05)
		// the nearly singular one: its factor's error grows with sqrt(cond)
		tu.CloseScaled(t, "ill-conditioned", got[4*n*n:], wl[4*n*n:], 3e-3, 0.05)
	})
}

// Empty batches and 0 x 0 matrices write nothing but info; bad calls are
// refused with nothing written.
func TestCholeskyShapesAndRefusals(t *testing.T) {
	a := tu.New(core.F32, []int64{0, 4, 4})
	require.NoError(t, Cholesky(a.Ptr(), false, tu.New(core.F32, []int64{0, 4, 4}).Ptr(),
		tu.New(core.I32, []int64{0}).Ptr(), nil))
	rng := tu.RNG(t)
	good := tu.New(core.F32, []int64{2, 3, 3}).Set(append(spd(rng, 3, 1, core.F32), spd(rng, 3, 1, core.F32)...))
	cases := []struct {
		name    string
		a, l, i *tu.Tensor
		status  core.Status
	}{
		{"not square", tu.New(core.F32, []int64{2, 3, 4}), tu.New(core.F32, []int64{2, 3, 4}), tu.New(core.I32, []int64{2}),
			core.ErrInvalidArgument},
		{"one dimension", tu.New(core.F32, []int64{9}), tu.New(core.F32, []int64{9}), tu.New(core.I32, []int64{1}),
			core.ErrInvalidArgument},
		{"l of another shape", good, tu.New(core.F32, []int64{2, 3, 2}), tu.New(core.I32, []int64{2}), core.ErrInvalidArgument},
		{"l of another dtype", good, tu.New(core.BF16, []int64{2, 3, 3}), tu.New(core.I32, []int64{2}), core.ErrUnsupportedDType},
		{"info float32", good, tu.New(core.F32, []int64{2, 3, 3}), tu.New(core.F32, []int64{2}), core.ErrUnsupportedDType},
		{"info int64", good, tu.New(core.F32, []int64{2, 3, 3}), tu.New(core.I64, []int64{2}), core.ErrUnsupportedDType},
		{"info of 3", good, tu.New(core.F32, []int64{2, 3, 3}), tu.New(core.I32, []int64{3}), core.ErrInvalidArgument},
		{"strided l", good, tu.New(core.F32, []int64{2, 3, 3}, tu.RowPad(1)), tu.New(core.I32, []int64{2}),
			core.ErrUnsupportedLayout},
		{"in place", good, good, tu.New(core.I32, []int64{2}), core.ErrInvalidArgument},
	}
	for _, k := range cases {
		before := [][]byte{k.l.Bytes(), k.i.Bytes()}
		if k.l == k.a {
			before[0] = append([]byte(nil), before[0]...)
		}
		err := Cholesky(k.a.Ptr(), false, k.l.Ptr(), k.i.Ptr(), nil)
		require.Equal(t, k.status, tu.Status(t, err), "%s: %v", k.name, err)
		require.Equal(t, before, [][]byte{k.l.Bytes(), k.i.Bytes()}, "%s: something was written", k.name)
	}
	// 0 x 0 matrices: info 0 each
	info := tu.New(core.I32, []int64{3})
	require.NoError(t, Cholesky(tu.New(core.F32, []int64{3, 0, 0}).Ptr(), true, tu.New(core.F32, []int64{3, 0, 0}).Ptr(),
		info.Ptr(), nil))
	require.Equal(t, []float64{0, 0, 0}, info.Values())
}
