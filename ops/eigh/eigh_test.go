package eigh

import (
	"fmt"
	"math"
	"math/rand/v2"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"metalcore/backend/cpu/simd"
	"metalcore/internal/core"
	tu "metalcore/tests/testutil"
)

// symmetric is a random symmetric n x n matrix (row-major) with entries
// N(0, 1), rounded to dt, its upper triangle (lower with upper) NaN and
// infinities: the triangle eigh must not read.
func symmetric(rng *rand.Rand, n int, dt core.DType, upper bool) []float64 {
	a := make([]float64, n*n)
	for i := range n {
		for j := range i + 1 {
			v := tu.Round(dt, rng.NormFloat64())
			a[i*n+j], a[j*n+i] = v, v
		}
	}
	poison(a, n, upper)
	return a
}

// poison sets the triangle eigh does not read to NaN and infinities.
func poison(a []float64, n int, upper bool) {
	for i := range n {
		for j := range i {
			bad := math.NaN()
			if (i+j)%2 == 1 {
				bad = math.Inf(1 - 2*(j%2))
			}
			if upper {
				a[i*n+j] = bad
			} else {
				a[j*n+i] = bad
			}
		}
	}
}

// lower is the read triangle of a as a lower-triangle matrix for RefEigh.
func lower(a []float64, n int, upper bool) []float64 {
	l := make([]float64, n*n)
	for i := range n {
		for j := range i + 1 {
			if upper {
				l[i*n+j] = a[j*n+i]
			} else {
				l[i*n+j] = a[i*n+j]
			}
		}
	}
	return l
}

func orders(b tu.Backend) []int {
	ns := []int{0, 1, 2, 3, 7, 16, 32, 33}
	if b.DeviceType != core.DeviceMetal {
		ns = append(ns, 64, 128)
	}
	return ns
}

// checkDecomposition holds w and v (row-major, eigenvectors in columns) of
// the symmetric a (its lower triangle) to the float64 eigenvalues within
// tol·‖A‖, A V = V diag(w) and Vᵀ V = I within tol·‖A‖ and tol (Frobenius,
// over √n): eigenvectors are checked by what defines them, not their signs.
func checkDecomposition(t *testing.T, what string, a, w, v []float64, n int, tol float64) {
	t.Helper()
	ref, _ := RefEigh(a, n)
	var norm float64
	for i := range n {
		for j := range i + 1 {
			k := 1.0
			if i != j {
				k = 2
			}
			norm += k * a[i*n+j] * a[i*n+j]
		}
	}
	norm = math.Sqrt(norm)
	for i := range n {
		require.LessOrEqual(t, math.Abs(w[i]-ref[i]), tol*(norm+1), "%s: eigenvalue %d = %g, want %g", what, i, w[i], ref[i])
		if i > 0 {
			require.LessOrEqual(t, w[i-1], w[i], "%s: eigenvalues not ascending at %d", what, i)
		}
	}
	if v == nil {
		return
	}
	sym := func(i, j int) float64 {
		if j > i {
			i, j = j, i
		}
		return a[i*n+j]
	}
	var res, orth float64
	for i := range n {
		for k := range n {
			av, vv := 0.0, 0.0
			for j := range n {
				av += sym(i, j) * v[j*n+k]
				vv += v[j*n+i] * v[j*n+k]
			}
			res += (av - v[i*n+k]*w[k]) * (av - v[i*n+k]*w[k])
			if i == k {
				vv--
			}
			orth += vv * vv
		}
	}
	scale := math.Sqrt(float64(max(n, 1)))
	require.LessOrEqual(t, math.Sqrt(res), tol*scale*(norm+1), "%s: ‖A V - V diag(w)‖", what)
	require.LessOrEqual(t, math.Sqrt(orth), tol*scale, "%s: ‖Vᵀ V - I‖", what)
}

// Every order, batch shape, triangle and dtype, with and without the
// eigenvectors, into poisoned outputs, against float64.
func TestEigh(t *testing.T) {
	tu.ForEachBackend(t, func(t *testing.T, be tu.Backend) {
		rng := tu.RNG(t)
		for _, dt := range tu.DTypes {
			for _, n := range orders(be) {
				for _, lead := range [][]int64{{}, {3}, {2, 2}} {
					for _, upper := range []bool{false, true} {
						batch := 1
						for _, d := range lead {
							batch *= int(d)
						}
						var av []float64
						for range batch {
							av = append(av, symmetric(rng, n, dt, upper)...)
						}
						shape := append(append([]int64(nil), lead...), int64(n), int64(n))
						vals := append(append([]int64(nil), lead...), int64(n))
						for _, vectors := range []bool{true, false} {
							what := fmt.Sprintf("%v n=%d batch %v upper %v vectors %v", dt, n, lead, upper, vectors)
							a, w, info := be.New(dt, shape).Set(av), be.New(dt, vals), be.New(core.I32, lead)
							var v *tu.Tensor
							vp := (*core.Tensor)(nil)
							if vectors {
								v = be.New(dt, shape)
								vp = v.Ptr()
							}
							require.NoError(t, Eigh(a.Ptr(), upper, w.Ptr(), vp, info.Ptr(), nil), what)
							require.Equal(t, make([]float64, batch), info.Values(), "%s: info", what)
							ws := w.Values()
							var vs []float64
							if vectors {
								vs = v.Values()
							}
							tol := 4 * tu.Tol(dt)
							for m := range batch {
								var vm []float64
								if vectors {
									vm = vs[m*n*n : (m+1)*n*n]
								}
								checkDecomposition(t, fmt.Sprintf("%s matrix %d", what, m), lower(av[m*n*n:(m+1)*n*n], n, upper),
									ws[m*n:(m+1)*n], vm, n, tol)
							}
						}
					}
				}
			}
		}
	})
}

// Repeated eigenvalues, zero, diagonal and ill-conditioned matrices beside
// a NaN one and an infinite one in one batch: each gets its own info, the
// NaN and infinite ones 1 and NaN eigenvalues, the rest converge.
func TestEighSpecialMatrices(t *testing.T) {
	tu.ForEachBackend(t, func(t *testing.T, be tu.Backend) {
		rng := tu.RNG(t)
		for _, n := range []int{5, 24, 40} {
			q := tu.Orthonormal(rng, n, n)
			spectrum := func(d func(i int) float64) []float64 { return tu.WithSpectrum(q, n, q, n, n, d) }
			mats := [][]float64{
				spectrum(func(k int) float64 { return float64(1 + k%2) }), // two eigenvalues, each repeated
				make([]float64, n*n), // zero
				spectrum(func(k int) float64 { return float64(k) - 2 }),                         // one repeated zero at most
				spectrum(func(k int) float64 { return math.Pow(1e4, float64(k)/float64(n-1)) }), // cond 1e4
				symmetric(rng, n, core.F32, false),
				// NaN, then infinite: an odd count, so that on the GPU up to
				// order 16 (two matrices a warp) the NaN one shares its warp
				// with a finite one and the infinite one with none
				symmetric(rng, n, core.F32, false),
				symmetric(rng, n, core.F32, false),
			}
			for i := range n {
				mats[1][i*n+i] = 0
			}
			mats[5][2*n+1] = math.NaN()
			mats[6][3*n+3] = math.Inf(1)
			if be.DeviceType == core.DeviceCPU && n >= 32 {
				// the tridiagonal path: rows whose magnitudes add up past
				// float32's range (the eigenvalues within it), and subnormal ones
				big, tiny := symmetric(rng, n, core.F32, false), symmetric(rng, n, core.F32, false)
				for i := range big {
					big[i] *= 1.5e37
					tiny[i] *= 1e-39
				}
				mats = append(mats[:4], append([][]float64{big, tiny}, mats[4:]...)...)
			}
			var av []float64
			for _, m := range mats {
				m = append([]float64(nil), m...)
				poison(m, n, false)
				av = append(av, m...)
			}
			k := int64(len(mats))
			a, w, v := be.New(core.F32, []int64{k, int64(n), int64(n)}).Set(av), be.New(core.F32, []int64{k, int64(n)}),
				be.New(core.F32, []int64{k, int64(n), int64(n)})
			info := be.New(core.I32, []int64{k})
			require.NoError(t, Eigh(a.Ptr(), false, w.Ptr(), v.Ptr(), info.Ptr(), nil))
			finite := len(mats) - 2
			want := make([]float64, len(mats))
			want[finite], want[finite+1] = 1, 1
			require.Equal(t, want, info.Values(), "n=%d", n)
			ws, vs := w.Values(), v.Values()
			for m := range finite {
				what := fmt.Sprintf("n=%d matrix %d", n, m)
				checkDecomposition(t, what, lower(av[m*n*n:(m+1)*n*n], n, false), ws[m*n:(m+1)*n], vs[m*n*n:(m+1)*n*n], n, 1e-5)
			}
			for m := finite; m < len(mats); m++ {
				require.True(t, math.IsNaN(ws[m*n+n-1]), "n=%d matrix %d: eigenvalues %v", n, m, ws[m*n:(m+1)*n])
			}
		}
	})
}

// Empty batches and 0 x 0 matrices write only info; bad calls are refused
// with nothing written.
func TestEighShapesAndRefusals(t *testing.T) {
	require.NoError(t, Eigh(tu.New(core.F32, []int64{0, 4, 4}).Ptr(), false, tu.New(core.F32, []int64{0, 4}).Ptr(),
		tu.New(core.F32, []int64{0, 4, 4}).Ptr(), tu.New(core.I32, []int64{0}).Ptr(), nil))
	info := tu.New(core.I32, []int64{3})
	require.NoError(t, Eigh(tu.New(core.F32, []int64{3, 0, 0}).Ptr(), false, tu.New(core.F32, []int64{3, 0}).Ptr(),
		nil, info.Ptr(), nil))
	require.Equal(t, []float64{0, 0, 0}, info.Values())
	rng := tu.RNG(t)
	a := tu.New(core.F32, []int64{2, 3, 3}).Set(append(symmetric(rng, 3, core.F32, false), symmetric(rng, 3, core.F32, false)...))
	w := func() *tu.Tensor { return tu.New(core.F32, []int64{2, 3}) }
	v := func() *tu.Tensor { return tu.New(core.F32, []int64{2, 3, 3}) }
	i2 := func() *tu.Tensor { return tu.New(core.I32, []int64{2}) }
	cases := []struct {
		name       string
		a, w, v, i *tu.Tensor
		status     core.Status
	}{
		{"not square", tu.New(core.F32, []int64{2, 3, 4}), w(), tu.New(core.F32, []int64{2, 3, 4}), i2(), core.ErrInvalidArgument},
		{"one dimension", tu.New(core.F32, []int64{9}), tu.New(core.F32, []int64{9}), v(), i2(), core.ErrInvalidArgument},
		{"w of another length", a, tu.New(core.F32, []int64{2, 4}), v(), i2(), core.ErrInvalidArgument},
		{"w flat", a, tu.New(core.F32, []int64{6}), v(), i2(), core.ErrInvalidArgument},
		{"v of another shape", a, w(), tu.New(core.F32, []int64{2, 3, 2}), i2(), core.ErrInvalidArgument},
		{"v of another dtype", a, w(), tu.New(core.BF16, []int64{2, 3, 3}), i2(), core.ErrUnsupportedDType},
		{"w of another dtype", a, tu.New(core.F16, []int64{2, 3}), v(), i2(), core.ErrUnsupportedDType},
		{"info float32", a, w(), v(), tu.New(core.F32, []int64{2}), core.ErrUnsupportedDType},
		{"info of 3", a, w(), v(), tu.New(core.I32, []int64{3}), core.ErrInvalidArgument},
		{"strided v", a, w(), tu.New(core.F32, []int64{2, 3, 3}, tu.RowPad(1)), i2(), core.ErrUnsupportedLayout},
		{"v over a", a, w(), a, i2(), core.ErrInvalidArgument},
	}
	for _, k := range cases {
		before := [][]byte{append([]byte(nil), k.w.Bytes()...), append([]byte(nil), k.v.Bytes()...), k.i.Bytes()}
		err := Eigh(k.a.Ptr(), false, k.w.Ptr(), k.v.Ptr(), k.i.Ptr(), nil)
		require.Equal(t, k.status, tu.Status(t, err), "%s: %v", k.name, err)
		if k.name != "v over a" {
			require.Equal(t, before, [][]byte{k.w.Bytes(), k.v.Bytes(), k.i.Bytes()}, "%s: something was written", k.name)
		}
	}
}

// The GPU kernels' sweep bound and stopping tangent are the CPU's.
func TestKernelConstants(t *testing.T) {
	for name, want := range map[string]float64{"EIGH_MAX_SWEEPS": MaxSweeps, "EIGH_STOP_TAN": simd.EighStopTan} {
		m := regexp.MustCompile(`#define ` + name + ` ([0-9.]+)f?\n`).FindStringSubmatch(kernels)
		require.NotNil(t, m, "%s not defined in eigh.cu", name)
		got, err := strconv.ParseFloat(m[1], 64)
		require.NoError(t, err)
		require.Equal(t, want, got, name)
	}
}
