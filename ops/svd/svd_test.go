package svd

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

// random is an m x n matrix (row-major) of N(0, 1) entries rounded to dt.
func random(rng *rand.Rand, m, n int, dt core.DType) []float64 {
	a := make([]float64, m*n)
	for i := range a {
		a[i] = tu.Round(dt, rng.NormFloat64())
	}
	return a
}

// Shapes: squares of every order the issue names, tall and wide ones (on
// the CPU one matrix at a time from 48 columns, both ways).
var testShapes = [][2]int{{0, 0}, {1, 1}, {2, 2}, {3, 3}, {7, 7}, {16, 16}, {32, 32}, {33, 33}, {64, 64}, {128, 128},
	{1, 5}, {5, 1}, {7, 3}, {3, 7}, {40, 9}, {9, 40}, {64, 16}, {16, 64}, {130, 31}, {50, 70}, {70, 50}}

// checkSVD holds s (and, when given, u [m, k] and vh [k, n], row-major) of
// the m x n a to the float64 singular values within tol·‖A‖ and descending,
// A = U diag(s) Vh within tol·‖A‖, Uᵀ U = I and Vh Vhᵀ = I within tol
// (Frobenius, over √k): vectors are checked by what defines them, not their
// signs.
func checkSVD(t *testing.T, what string, a, s, u, vh []float64, m, n int, tol float64) {
	t.Helper()
	k := min(m, n)
	ref := RefSVD(a, m, n)
	norm := 0.0
	for _, x := range a {
		norm += x * x
	}
	norm = math.Sqrt(norm)
	for i := range k {
		require.LessOrEqual(t, math.Abs(s[i]-ref[i]), tol*(norm+1), "%s: singular value %d = %g, want %g", what, i, s[i], ref[i])
		if i > 0 {
			require.LessOrEqual(t, s[i], s[i-1], "%s: singular values not descending at %d", what, i)
		}
	}
	if u == nil {
		return
	}
	var res, orthU, orthV float64
	for i := range m {
		for j := range n {
			x := a[i*n+j]
			for l := range k {
				x -= u[i*k+l] * s[l] * vh[l*n+j]
			}
			res += x * x
		}
	}
	for p := range k {
		for q := range k {
			uu, vv := 0.0, 0.0
			for i := range m {
				uu += u[i*k+p] * u[i*k+q]
			}
			for j := range n {
				vv += vh[p*n+j] * vh[q*n+j]
			}
			if p == q {
				uu, vv = uu-1, vv-1
			}
			orthU, orthV = orthU+uu*uu, orthV+vv*vv
		}
	}
	scale := math.Sqrt(float64(max(k, 1)))
	require.LessOrEqual(t, math.Sqrt(res), tol*scale*(norm+1), "%s: ‖A - U diag(s) Vh‖", what)
	require.LessOrEqual(t, math.Sqrt(orthU), tol*scale, "%s: ‖Uᵀ U - I‖", what)
	require.LessOrEqual(t, math.Sqrt(orthV), tol*scale, "%s: ‖Vh Vhᵀ - I‖", what)
}

// outputs are a call's poisoned s, u, vh (nil without vectors) and info.
func outputs(be tu.Backend, dt core.DType, lead []int64, m, n int, vectors bool) (s, u, vh, info *tu.Tensor) {
	k := int64(min(m, n))
	with := func(dims ...int64) []int64 { return append(append([]int64(nil), lead...), dims...) }
	s, info = be.New(dt, with(k)), be.New(core.I32, lead)
	if vectors {
		u, vh = be.New(dt, with(int64(m), k)), be.New(dt, with(k, int64(n)))
	}
	return
}

func ptr(t *tu.Tensor) *core.Tensor {
	if t == nil {
		return nil
	}
	return t.Ptr()
}

func values(t *tu.Tensor) []float64 {
	if t == nil {
		return nil
	}
	return t.Values()
}

// Every shape, batch shape and dtype, with and without the vectors, into
// poisoned outputs, against float64.
func TestSVD(t *testing.T) {
	tu.ForEachBackend(t, func(t *testing.T, be tu.Backend) {
		rng := tu.RNG(t)
		for _, dt := range tu.DTypes {
			for _, mn := range testShapes {
				m, n := mn[0], mn[1]
				for _, lead := range [][]int64{{}, {3}, {2, 2}} {
					batch := 1
					for _, d := range lead {
						batch *= int(d)
					}
					var av []float64
					for range batch {
						av = append(av, random(rng, m, n, dt)...)
					}
					shape := append(append([]int64(nil), lead...), int64(m), int64(n))
					for _, vectors := range []bool{true, false} {
						what := fmt.Sprintf("%v %dx%d batch %v vectors %v", dt, m, n, lead, vectors)
						a := be.New(dt, shape).Set(av)
						s, u, vh, info := outputs(be, dt, lead, m, n, vectors)
						require.NoError(t, SVD(a.Ptr(), ptr(u), s.Ptr(), ptr(vh), info.Ptr(), nil), what)
						require.Equal(t, make([]float64, batch), info.Values(), "%s: info", what)
						ss, us, vhs := s.Values(), values(u), values(vh)
						k := min(m, n)
						for b := range batch {
							var ub, vb []float64
							if vectors {
								ub, vb = us[b*m*k:(b+1)*m*k], vhs[b*k*n:(b+1)*k*n]
							}
							checkSVD(t, fmt.Sprintf("%s matrix %d", what, b), av[b*m*n:(b+1)*m*n], ss[b*k:(b+1)*k], ub, vb,
								m, n, 4*tu.Tol(dt))
						}
					}
				}
			}
		}
	})
}

// A batch of tall matrices too large for the CPU's lanes (B and V past
// maxLaneFloats) and few columns: one matrix per worker, in either
// orientation.
func TestSVDPastLanes(t *testing.T) {
	be := tu.CPU
	rng := tu.RNG(t)
	for _, mn := range [][2]int{{2100, 16}, {16, 2100}} {
		m, n := mn[0], mn[1]
		require.Greater(t, max(m, n)*min(m, n)+min(m, n)*min(m, n), maxLaneFloats)
		var av []float64
		for range 3 {
			av = append(av, random(rng, m, n, core.F32)...)
		}
		lead := []int64{3}
		a := be.New(core.F32, []int64{3, int64(m), int64(n)}).Set(av)
		s, u, vh, info := outputs(be, core.F32, lead, m, n, true)
		require.NoError(t, SVD(a.Ptr(), u.Ptr(), s.Ptr(), vh.Ptr(), info.Ptr(), nil))
		require.Equal(t, []float64{0, 0, 0}, info.Values())
		k := min(m, n)
		ss, us, vhs := s.Values(), u.Values(), vh.Values()
		for b := range 3 {
			checkSVD(t, fmt.Sprintf("%dx%d matrix %d", m, n, b), av[b*m*n:(b+1)*m*n], ss[b*k:(b+1)*k],
				us[b*m*k:(b+1)*m*k], vhs[b*k*n:(b+1)*k*n], m, n, 4*tu.Tol(core.F32))
		}
	}
}

// Zero, rank-deficient, orthogonal, repeated-value and ill-conditioned
// matrices beside a NaN one and an infinite one in one batch: each gets
// its own info, the NaN and infinite ones 1 and NaN outputs; the others
// converge with orthonormal U and Vh, a zero singular value's vectors
// included.
func TestSVDSpecialMatrices(t *testing.T) {
	tu.ForEachBackend(t, func(t *testing.T, be tu.Backend) {
		rng := tu.RNG(t)
		for _, mn := range [][2]int{{5, 5}, {24, 24}, {30, 7}, {7, 30}, {40, 36}, {20, 45}, {60, 50}} {
			m, n := mn[0], mn[1]
			k := min(m, n)
			p, q := tu.Orthonormal(rng, m, k), tu.Orthonormal(rng, n, k)
			spectrum := func(d func(i int) float64) []float64 { return tu.WithSpectrum(p, m, q, n, k, d) }
			rank1 := spectrum(func(l int) float64 { return float64(1 - min(l, 1)) })
			zeroCol := random(rng, m, n, core.F32)
			for i := range m {
				zeroCol[i*n+n/2] = 0
			}
			mats := [][]float64{
				make([]float64, m*n), // zero
				rank1,
				zeroCol,
				spectrum(func(int) float64 { return 1 }), // orthonormal columns or rows
				spectrum(func(l int) float64 { return float64(1 + l%2) }),                      // repeated values
				spectrum(func(l int) float64 { return math.Pow(1e-4, float64(l)/float64(k)) }), // cond about 1e4
				random(rng, m, n, core.F32),
				random(rng, m, n, core.F32),
			}
			mats[6][3] = math.NaN()
			mats[7][m*n-1] = math.Inf(-1)
			var av []float64
			for _, mat := range mats {
				av = append(av, mat...)
			}
			nb := int64(len(mats))
			a := be.New(core.F32, []int64{nb, int64(m), int64(n)}).Set(av)
			s, u, vh, info := outputs(be, core.F32, []int64{nb}, m, n, true)
			require.NoError(t, SVD(a.Ptr(), u.Ptr(), s.Ptr(), vh.Ptr(), info.Ptr(), nil))
			require.Equal(t, []float64{0, 0, 0, 0, 0, 0, 1, 1}, info.Values(), "%dx%d", m, n)
			ss, us, vhs := s.Values(), u.Values(), vh.Values()
			for b := range 6 {
				checkSVD(t, fmt.Sprintf("%dx%d matrix %d", m, n, b), mats[b], ss[b*k:(b+1)*k], us[b*m*k:(b+1)*m*k],
					vhs[b*k*n:(b+1)*k*n], m, n, 1e-5)
			}
			for b := 6; b < 8; b++ {
				for _, part := range [][]float64{ss[b*k : (b+1)*k], us[b*m*k : (b+1)*m*k], vhs[b*k*n : (b+1)*k*n]} {
					for _, x := range part {
						require.True(t, math.IsNaN(x), "%dx%d matrix %d: %v", m, n, b, part)
					}
				}
			}
		}
	})
}

// Batches of rank-deficient products (rank 1, 2 and half the order): their
// columns collapse onto few directions, leaving the others rounding
// residue many orders shorter, which must neither keep the sweeps going nor
// leave U and Vh short of orthonormal.
func TestSVDRankDeficient(t *testing.T) {
	tu.ForEachBackend(t, func(t *testing.T, be tu.Backend) {
		rng := tu.RNG(t)
		for _, mn := range [][2]int{{5, 5}, {24, 24}, {30, 7}, {7, 30}, {40, 36}, {60, 50}} {
			m, n := mn[0], mn[1]
			k := min(m, n)
			var av []float64
			const batch = 24
			for b := range batch {
				rank := []int{1, 2, max(1, k/2)}[b%3]
				p, q := random(rng, m, rank, core.F32), random(rng, rank, n, core.F32)
				for i := range m {
					for j := range n {
						x := 0.0
						for l := range rank {
							x += p[i*rank+l] * q[l*n+j]
						}
						av = append(av, x)
					}
				}
			}
			a := be.New(core.F32, []int64{batch, int64(m), int64(n)}).Set(av)
			s, u, vh, info := outputs(be, core.F32, []int64{batch}, m, n, true)
			require.NoError(t, SVD(a.Ptr(), u.Ptr(), s.Ptr(), vh.Ptr(), info.Ptr(), nil))
			require.Equal(t, make([]float64, batch), info.Values(), "%dx%d", m, n)
			ss, us, vhs := s.Values(), u.Values(), vh.Values()
			for b := range batch {
				checkSVD(t, fmt.Sprintf("%dx%d matrix %d", m, n, b), av[b*m*n:(b+1)*m*n], ss[b*k:(b+1)*k],
					us[b*m*k:(b+1)*m*k], vhs[b*k*n:(b+1)*k*n], m, n, 1e-5)
			}
		}
	})
}

// Empty batches and empty matrices write only info; bad calls are refused
// with nothing written.
func TestSVDShapesAndRefusals(t *testing.T) {
	require.NoError(t, SVD(tu.New(core.F32, []int64{0, 4, 3}).Ptr(), tu.New(core.F32, []int64{0, 4, 3}).Ptr(),
		tu.New(core.F32, []int64{0, 3}).Ptr(), tu.New(core.F32, []int64{0, 3, 3}).Ptr(), tu.New(core.I32, []int64{0}).Ptr(), nil))
	info := tu.New(core.I32, []int64{3})
	u, vh := tu.New(core.F32, []int64{3, 4, 0}), tu.New(core.F32, []int64{3, 0, 0})
	require.NoError(t, SVD(tu.New(core.F32, []int64{3, 4, 0}).Ptr(), u.Ptr(), tu.New(core.F32, []int64{3, 0}).Ptr(), vh.Ptr(),
		info.Ptr(), nil))
	require.Equal(t, []float64{0, 0, 0}, info.Values())
	rng := tu.RNG(t)
	a := tu.New(core.F32, []int64{2, 4, 3}).Set(random(rng, 8, 3, core.F32))
	s := func() *tu.Tensor { return tu.New(core.F32, []int64{2, 3}) }
	uu := func() *tu.Tensor { return tu.New(core.F32, []int64{2, 4, 3}) }
	vv := func() *tu.Tensor { return tu.New(core.F32, []int64{2, 3, 3}) }
	i2 := func() *tu.Tensor { return tu.New(core.I32, []int64{2}) }
	cases := []struct {
		name           string
		a, u, s, vh, i *tu.Tensor
		status         core.Status
	}{
		{"one dimension", tu.New(core.F32, []int64{9}), uu(), s(), vv(), i2(), core.ErrInvalidArgument},
		{"u without vh", a, uu(), s(), nil, i2(), core.ErrInvalidArgument},
		{"vh without u", a, nil, s(), vv(), i2(), core.ErrInvalidArgument},
		{"s of another length", a, uu(), tu.New(core.F32, []int64{2, 4}), vv(), i2(), core.ErrInvalidArgument},
		{"s flat", a, uu(), tu.New(core.F32, []int64{6}), vv(), i2(), core.ErrInvalidArgument},
		{"u full", a, tu.New(core.F32, []int64{2, 4, 4}), s(), vv(), i2(), core.ErrInvalidArgument},
		{"vh of another shape", a, uu(), s(), tu.New(core.F32, []int64{2, 3, 4}), i2(), core.ErrInvalidArgument},
		{"u of another dtype", a, tu.New(core.BF16, []int64{2, 4, 3}), s(), vv(), i2(), core.ErrUnsupportedDType},
		{"s of another dtype", a, uu(), tu.New(core.F16, []int64{2, 3}), vv(), i2(), core.ErrUnsupportedDType},
		{"info float32", a, uu(), s(), vv(), tu.New(core.F32, []int64{2}), core.ErrUnsupportedDType},
		{"info of 3", a, uu(), s(), vv(), tu.New(core.I32, []int64{3}), core.ErrInvalidArgument},
		{"strided u", a, tu.New(core.F32, []int64{2, 4, 3}, tu.RowPad(1)), s(), vv(), i2(), core.ErrUnsupportedLayout},
		{"u over a", a, a, s(), vv(), i2(), core.ErrInvalidArgument},
	}
	for _, k := range cases {
		outs := []*tu.Tensor{k.u, k.s, k.vh, k.i}
		var before [][]byte
		for _, o := range outs {
			if o != nil && o != a {
				before = append(before, append([]byte(nil), o.Bytes()...))
			}
		}
		err := SVD(k.a.Ptr(), ptr(k.u), k.s.Ptr(), ptr(k.vh), k.i.Ptr(), nil)
		require.Equal(t, k.status, tu.Status(t, err), "%s: %v", k.name, err)
		var after [][]byte
		for _, o := range outs {
			if o != nil && o != a {
				after = append(after, o.Bytes())
			}
		}
		require.Equal(t, before, after, "%s: something was written", k.name)
	}
}

// The GPU kernels' sweep bound, tolerance (times √rows) and stopping sine
// are the CPU's.
func TestKernelConstants(t *testing.T) {
	for name, want := range map[string]float64{"SVD_MAX_SWEEPS": MaxSweeps, "SVD_TOLERANCE": float64(tolerance(1)),
		"SVD_STOP_SIN": simd.SVDStopSin} {
		m := regexp.MustCompile(`#define ` + name + ` ([0-9.e-]+)f?`).FindStringSubmatch(kernels)
		require.NotNil(t, m, "%s not defined in svd.cu", name)
		got, err := strconv.ParseFloat(m[1], 32)
		require.NoError(t, err)
		require.Equal(t, float32(want), float32(got), name)
	}
}
