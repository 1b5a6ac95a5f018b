package solve

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"metalcore/internal/core"
	tu "metalcore/tests/testutil"
)

// random is an n x n matrix with entries N(0, 1) plus shift on the
// diagonal, rounded to dt.
func random(rng *rand.Rand, n int, shift float64, dt core.DType) []float64 {
	a := make([]float64, n*n)
	for i := range a {
		a[i] = rng.NormFloat64()
	}
	for i := range n {
		a[i*n+i] += shift
	}
	for i := range a {
		a[i] = tu.Round(dt, a[i])
	}
	return a
}

func orders(b tu.Backend) []int {
	ns := []int{0, 1, 2, 3, 7, 16, 32, 33, 64}
	if b.DeviceType != core.DeviceMetal {
		ns = append(ns, 128)
	}
	return ns
}

// want is the float64 solution of each system and its info.
func want(a, b []float64, batch, n, k int) ([]float64, []float64) {
	var x, info []float64
	for m := range batch {
		s, i := RefSolve(a[m*n*n:(m+1)*n*n], b[m*n*k:(m+1)*n*k], n, k)
		if i != 0 { // singular: NaN, as the library writes it
			s = make([]float64, n*k)
			for j := range s {
				s[j] = math.NaN()
			}
		}
		x, info = append(x, s...), append(info, float64(i))
	}
	return x, info
}

// Every order, batch shape, right-hand side count and dtype against
// float64, into poisoned outputs and in place over b. The matrices are
// diagonally weighted (condition numbers of a few dozen at most), so the
// solution carries the inputs' rounding times a modest factor.
func TestSolve(t *testing.T) {
	tu.ForEachBackend(t, func(t *testing.T, be tu.Backend) {
		rng := tu.RNG(t)
		for _, dt := range tu.DTypes {
			for _, n := range orders(be) {
				for _, k := range []int{1, 3, 40} {
					for _, lead := range [][]int64{{}, {3}, {2, 2}} {
						batch := 1
						for _, d := range lead {
							batch *= int(d)
						}
						var av, bv []float64
						for range batch {
							av = append(av, random(rng, n, 2*math.Sqrt(float64(n)), dt)...)
							for range n * k {
								bv = append(bv, tu.Round(dt, rng.NormFloat64()))
							}
						}
						shape := append(append([]int64(nil), lead...), int64(n), int64(n))
						rhs := append(append([]int64(nil), lead...), int64(n), int64(k))
						wx, wi := want(av, bv, batch, n, k)
						for _, inPlace := range []bool{false, true} {
							what := fmt.Sprintf("%v n=%d k=%d batch %v in place %v", dt, n, k, lead, inPlace)
							a, b := be.New(dt, shape).Set(av), be.New(dt, rhs).Set(bv)
							x, info := b, be.New(core.I32, lead)
							if !inPlace {
								x = be.New(dt, rhs)
							}
							require.NoError(t, Solve(a.Ptr(), b.Ptr(), x.Ptr(), info.Ptr(), nil), what)
							require.Equal(t, wi, info.Values(), what)
							tu.CloseScaled(t, what, x.Values(), wx, 8*tu.Tol(dt), 1)
							if !inPlace && n > 0 {
								require.Equal(t, av, a.Values(), "%s: a was written", what)
							}
						}
					}
				}
			}
		}
	})
}

// Singular matrices among regular ones (exactly: a zero matrix, a zero
// column): each gets its own info (the first zero pivot) and NaN solutions, the others solve; a NaN anywhere in A or B
// gives NaN in that system's solution; an ill-conditioned one (cond about
// 1e4) stays accurate to cond times float32's rounding.
func TestSolveMixedBatch(t *testing.T) {
	tu.ForEachBackend(t, func(t *testing.T, be tu.Backend) {
		rng := tu.RNG(t)
		for _, n := range []int{5, 24, 48} {
			const k = 2
			var av, bv []float64
			for m := range 6 {
				a := random(rng, n, 2*math.Sqrt(float64(n)), core.F32)
				switch m {
				case 1: // zero matrix: the first pivot is zero
					clear(a)
				case 2: // column 3 zero: the fourth pivot is exactly zero
					for i := range n {
						a[i*n+3] = 0
					}
				case 3: // a NaN in A
					a[n+2] = math.NaN()
				case 5: // cond about 1e4: a diagonal matrix scaled down in one direction
					clear(a)
					for i := range n {
						a[i*n+i] = 1
					}
					a[(n/2)*n+n/2] = 1e-4
				}
				av = append(av, a...)
				for range n * k {
					bv = append(bv, rng.NormFloat64())
				}
			}
			bv[4*n*k+1] = math.NaN() // a NaN in B
			a, b := be.New(core.F32, []int64{6, int64(n), int64(n)}).Set(av), be.New(core.F32, []int64{6, int64(n), k}).Set(bv)
			x, info := be.New(core.F32, []int64{6, int64(n), k}), be.New(core.I32, []int64{6})
			require.NoError(t, Solve(a.Ptr(), b.Ptr(), x.Ptr(), info.Ptr(), nil))
			wx, wi := want(av, bv, 6, n, k)
			got := info.Values()
			require.Equal(t, []float64{0, 1, 4, 0, 0, 0}, got, "n=%d", n)
			require.Equal(t, got, wi, "n=%d: the reference's info", n)
			xs, per := x.Values(), n*k
			for _, m := range []int{1, 2, 3} {
				for _, v := range xs[m*per : (m+1)*per] {
					require.True(t, math.IsNaN(v), "n=%d system %d: %v", n, m, xs[m*per:(m+1)*per])
				}
			}
			require.True(t, math.IsNaN(xs[4*per+1]) || math.IsNaN(xs[4*per]), "n=%d: a NaN in B reached no solution", n)
			tu.CloseScaled(t, "regular", xs[:per], wx[:per], 1e-5, 1)
			tu.CloseScaled(t, "ill-conditioned", xs[5*per:], wx[5*per:], 1e-5, 1e4)
		}
	})
}

// Empty batches, no right-hand sides and 0 x 0 systems write only info;
// bad calls are refused with nothing written.
func TestSolveShapesAndRefusals(t *testing.T) {
	require.NoError(t, Solve(tu.New(core.F32, []int64{0, 4, 4}).Ptr(), tu.New(core.F32, []int64{0, 4, 1}).Ptr(),
		tu.New(core.F32, []int64{0, 4, 1}).Ptr(), tu.New(core.I32, []int64{0}).Ptr(), nil))
	info := tu.New(core.I32, []int64{3})
	require.NoError(t, Solve(tu.New(core.F32, []int64{3, 0, 0}).Ptr(), tu.New(core.F32, []int64{3, 0, 2}).Ptr(),
		tu.New(core.F32, []int64{3, 0, 2}).Ptr(), info.Ptr(), nil))
	require.Equal(t, []float64{0, 0, 0}, info.Values())
	rng := tu.RNG(t)
	a := tu.New(core.F32, []int64{2, 3, 3}).Set(append(random(rng, 3, 3, core.F32), random(rng, 3, 3, core.F32)...))
	b := tu.New(core.F32, []int64{2, 3, 1}).Set([]float64{1, 2, 3, 4, 5, 6})
	x, i2 := func() *tu.Tensor { return tu.New(core.F32, []int64{2, 3, 1}) }, func() *tu.Tensor { return tu.New(core.I32, []int64{2}) }
	cases := []struct {
		name       string
		a, b, x, i *tu.Tensor
		status     core.Status
	}{
		{"not square", tu.New(core.F32, []int64{2, 3, 4}), b, x(), i2(), core.ErrInvalidArgument},
		{"one dimension", tu.New(core.F32, []int64{9}), tu.New(core.F32, []int64{9}), tu.New(core.F32, []int64{9}), i2(),
			core.ErrInvalidArgument},
		{"b of other rows", a, tu.New(core.F32, []int64{2, 4, 1}), tu.New(core.F32, []int64{2, 4, 1}), i2(), core.ErrInvalidArgument},
		{"b of another batch", a, tu.New(core.F32, []int64{3, 3, 1}), tu.New(core.F32, []int64{3, 3, 1}), i2(), core.ErrInvalidArgument},
		{"b a vector", a, tu.New(core.F32, []int64{2, 3}), tu.New(core.F32, []int64{2, 3}), i2(), core.ErrInvalidArgument},
		{"x of another shape", a, b, tu.New(core.F32, []int64{2, 3, 2}), i2(), core.ErrInvalidArgument},
		{"b of another dtype", a, tu.New(core.BF16, []int64{2, 3, 1}), tu.New(core.BF16, []int64{2, 3, 1}), i2(), core.ErrUnsupportedDType},
		{"info float32", a, b, x(), tu.New(core.F32, []int64{2}), core.ErrUnsupportedDType},
		{"info of 3", a, b, x(), tu.New(core.I32, []int64{3}), core.ErrInvalidArgument},
		{"strided x", a, b, tu.New(core.F32, []int64{2, 3, 1}, tu.RowPad(1)), i2(), core.ErrUnsupportedLayout},
		{"x over a", a, tu.New(core.F32, []int64{2, 3, 3}), a, i2(), core.ErrInvalidArgument},
	}
	for _, k := range cases {
		before := [][]byte{append([]byte(nil), k.x.Bytes()...), k.i.Bytes()}
		err := Solve(k.a.Ptr(), k.b.Ptr(), k.x.Ptr(), k.i.Ptr(), nil)
		require.Equal(t, k.status, tu.Status(t, err), "%s: %v", k.name, err)
		require.Equal(t, before, [][]byte{k.x.Bytes(), k.i.Bytes()}, "%s: something was written", k.name)
	}
}
