package qr

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"metalcore/internal/core"
	tu "metalcore/tests/testutil"
)

// kind of test matrix
type kind int

const (
	random kind = iota
	rankDeficient
	zeros
	identity
	tiny   // scaled by 1e-30
	huge   // scaled by 1e30
	graded // column j scaled by 10^(-8j/n): eight orders of magnitude across
)

func values(rng *rand.Rand, k kind, batch, m, n int) []float64 {
	v := make([]float64, batch*m*n)
	for b := range batch {
		for i := range m {
			for j := range n {
				x := rng.NormFloat64()
				switch k {
				case rankDeficient: // rank <= 2: every column a mix of the first two
					x = float64(j%3-1)*math.Sin(float64(i+b)) + float64(j%2)*math.Cos(float64(3*i))
				case zeros:
					x = 0
				case identity:
					x = 0
					if i == j {
						x = 1
					}
				case tiny:
					x *= 1e-30
				case huge:
					x *= 1e30
				case graded:
					x *= math.Pow(10, -8*float64(j)/float64(n))
				}
				v[(b*m+i)*n+j] = x
			}
		}
	}
	return v
}

// check verifies one factorization in float64: r upper triangular with exact
// zeros below the diagonal, ||q r - a|| / ||a|| and ||q^T q - I|| within a
// bound proportional to the size times float32's precision, plus the
// rounding of the outputs to their dtype (eps).
func check(t *testing.T, what string, a, q, r []float64, batch, m, n, qc, rr int, eps float64) {
	t.Helper()
	for b := range batch {
		A := a[b*m*n : (b+1)*m*n]
		R := r[b*rr*n : (b+1)*rr*n]
		for i := range rr {
			for j := range min(i, n) {
				require.Equal(t, 0.0, R[i*n+j], "%s: r[%d][%d] below the diagonal", what, i, j)
			}
		}
		if q == nil {
			continue
		}
		Q := q[b*m*qc : (b+1)*m*qc]
		var num, den, orth float64
		for i := range m {
			for j := range n {
				var s float64
				for l := range min(qc, rr) {
					s += Q[i*qc+l] * R[l*n+j]
				}
				num += (s - A[i*n+j]) * (s - A[i*n+j])
				den += A[i*n+j] * A[i*n+j]
			}
		}
		for i := range qc {
			for j := range qc {
				var s float64
				for l := range m {
					s += Q[l*qc+i] * Q[l*qc+j]
				}
				if i == j {
					s--
				}
				orth = math.Max(orth, math.Abs(s))
			}
		}
		bound := 10*float64(max(m, n))/(1<<24) + 4*eps // float32 arithmetic, then rounding to the dtype
		if den > 0 {
			require.LessOrEqual(t, math.Sqrt(num/den), bound, "%s: ||QR - A|| / ||A||", what)
		} else {
			require.LessOrEqual(t, math.Sqrt(num), 0.0, "%s: QR of zero", what)
		}
		require.LessOrEqual(t, orth, bound, "%s: ||Q^T Q - I||", what)
	}
}

// eps is the relative precision of results stored in dt (computed in float32).
func eps(dt core.DType) float64 {
	switch dt {
	case core.BF16:
		return 1.0 / 256
	case core.F16:
		return 1.0 / 2048
	}
	return 1.0 / (1 << 24)
}

// workspace is the workspace QR asks for (nil when none).
func workspace(t *testing.T, a *tu.Tensor, mode int32) *core.Tensor {
	n, err := WorkspaceSize(a.Ptr(), mode)
	require.NoError(t, err)
	if n == 0 {
		return nil
	}
	return a.On().New(core.F32, []int64{n / 4}).Ptr()
}

// shapes of the factorization tests: batch, m, n. On CUDA, up to 128 take
// the one-block kernels (32, 64 or 128 rows in registers: both sides of
// each bound, wide and tall) and larger ones the blocked path (several
// panels, partial last panels, wide and tall).
var factorShapes = [][3]int{{1, 1, 1}, {3, 5, 5}, {2, 7, 3}, {2, 3, 7}, {2, 32, 32}, {1, 33, 17}, {4, 16, 16},
	{1, 64, 64}, {1, 40, 128}, {2, 100, 90}, {1, 96, 20}, {1, 64, 130}, {1, 129, 65}, {2, 128, 128}, {2, 150, 97},
	{1, 70, 200}, {1, 257, 100}}

func TestFactorizations(t *testing.T) {
	tu.ForEachBackend(t, func(t *testing.T, b tu.Backend) { factorizations(t, b, tu.DTypes) })
}

// The blocked CPU path on the same matrices from min(m, n) = 5 up (several
// panels, partial last panels, wide and tall): panels of 1 column (an
// eighth of blockWidth, as mid-size matrices take) and of 8 (the width of
// larger ones), less than one kernel tile and one, and panels of 24
// factored 8 columns at a time (as wide panels are).
func TestBlockedFactorizations(t *testing.T) {
	defer func(m, w, mid, in int) {
		blockedMin, blockWidth, midSize, innerWidth = m, w, mid, in
	}(blockedMin, blockWidth, midSize, innerWidth)
	for _, c := range [][3]int{{8, midSize, 8}, {8, 0, 8}, {24, 0, 8}} {
		blockedMin, blockWidth, midSize, innerWidth = 4, c[0], c[1], c[2]
		t.Run(fmt.Sprintf("panels of %d, inner %d", cpuPanelWidth(5), innerWidth), func(t *testing.T) {
			tu.ForEachISA(t, func(t *testing.T) { factorizations(t, tu.CPU, []core.DType{core.F32, core.BF16}) })
		})
	}
}

// factorizations checks every mode on every kind of matrix of factorShapes.
func factorizations(t *testing.T, b tu.Backend, dtypes []core.DType) {
	rng := tu.RNG(t)
	for _, dt := range dtypes {
		for _, sh := range factorShapes {
			batch, m, n := sh[0], sh[1], sh[2]
			for _, k := range []kind{random, rankDeficient, zeros, identity, tiny, huge, graded} {
				if dt == core.F16 && (k == tiny || k == huge || k == graded) {
					continue // outside float16's range
				}
				for _, mode := range []int32{Reduced, Complete, ROnly} {
					what := fmt.Sprintf("%s batch %d %dx%d kind %d mode %d", dt, batch, m, n, k, mode)
					kk := min(m, n)
					qc, rr := kk, kk
					if mode == Complete {
						qc, rr = m, m
					}
					a := b.New(dt, []int64{int64(batch), int64(m), int64(n)})
					av := a.Set(values(rng, k, batch, m, n)).Values()
					r := b.New(dt, []int64{int64(batch), int64(rr), int64(n)})
					var q *tu.Tensor
					var qp *core.Tensor
					if mode != ROnly {
						q = b.New(dt, []int64{int64(batch), int64(m), int64(qc)})
						qp = q.Ptr()
					}
					before := a.Bytes()
					require.NoError(t, QR(a.Ptr(), mode, qp, r.Ptr(), workspace(t, a, mode), nil), what)
					require.Equal(t, before, a.Bytes(), "%s: a was modified", what)
					var qs []float64
					if q != nil {
						qs = q.Values()
					}
					check(t, what, av, qs, r.Values(), batch, m, n, qc, rr, eps(dt))
					if mode == ROnly { // r-only equals the reduced factorization's r
						r2, q2 := b.New(dt, []int64{int64(batch), int64(kk), int64(n)}), b.New(dt, []int64{int64(batch), int64(m), int64(kk)})
						require.NoError(t, QR(a.Ptr(), Reduced, q2.Ptr(), r2.Ptr(), workspace(t, a, Reduced), nil))
						require.Equal(t, r2.Values(), r.Values(), what)
					}
				}
			}
		}
	}
}

// LAPACK's sign convention: the diagonal of r is -sign(a11) * norm for the
// first column.
func TestSignConvention(t *testing.T) {
	a := tu.New(core.F32, []int64{2, 2}).Set([]float64{3, 1, 4, 2})
	r := tu.New(core.F32, []int64{2, 2})
	require.NoError(t, QR(a.Ptr(), ROnly, nil, r.Ptr(), nil, nil))
	require.InDelta(t, -5.0, r.Values()[0], 1e-6)
}

func TestBadInputs(t *testing.T) {
	a := tu.New(core.F32, []int64{2, 4, 3}).Set(make([]float64, 24))
	q, r := tu.New(core.F32, []int64{2, 4, 3}), tu.New(core.F32, []int64{2, 3, 3})
	for _, c := range []struct {
		name string
		want core.Status
		run  func() error
	}{
		{"1-D a", core.ErrInvalidArgument, func() error {
			x := tu.New(core.F32, []int64{4})
			return QR(x.Ptr(), ROnly, nil, r.Ptr(), nil, nil)
		}},
		{"bad mode", core.ErrInvalidArgument, func() error { return QR(a.Ptr(), 3, q.Ptr(), r.Ptr(), nil, nil) }},
		{"q in r mode", core.ErrInvalidArgument, func() error { return QR(a.Ptr(), ROnly, q.Ptr(), r.Ptr(), nil, nil) }},
		{"wrong r shape", core.ErrInvalidArgument, func() error {
			return QR(a.Ptr(), Complete, tu.New(core.F32, []int64{2, 4, 4}).Ptr(), r.Ptr(), nil, nil)
		}},
		{"wrong q shape", core.ErrInvalidArgument, func() error {
			return QR(a.Ptr(), Reduced, tu.New(core.F32, []int64{2, 4, 4}).Ptr(), r.Ptr(), nil, nil)
		}},
		{"mixed dtypes", core.ErrUnsupportedDType, func() error {
			return QR(a.Ptr(), Reduced, q.Ptr(), tu.New(core.BF16, []int64{2, 3, 3}).Ptr(), nil, nil)
		}},
		{"NULL r", core.ErrInvalidArgument, func() error { return QR(a.Ptr(), Reduced, q.Ptr(), nil, nil, nil) }},
		{"non-contiguous a", core.ErrUnsupportedLayout, func() error {
			x := tu.New(core.F32, []int64{2, 4, 3}, tu.RowPad(1))
			return QR(x.Ptr(), Reduced, q.Ptr(), r.Ptr(), nil, nil)
		}},
		{"r over a", core.ErrInvalidArgument, func() error {
			over := *r.Ptr()
			over.Data = a.Ptr().Data
			return QR(a.Ptr(), Reduced, q.Ptr(), &over, nil, nil)
		}},
	} {
		q.Poison()
		r.Poison()
		bq, br := q.Bytes(), r.Bytes()
		err := c.run()
		require.Equal(t, c.want, tu.Status(t, err), "%s: %v", c.name, err)
		require.NotEmpty(t, err.Error())
		require.Equal(t, bq, q.Bytes(), c.name)
		require.Equal(t, br, r.Bytes(), c.name)
	}
	n, err := WorkspaceSize(a.Ptr(), Reduced)
	require.NoError(t, err)
	require.Zero(t, n)
	empty := tu.New(core.F32, []int64{0, 4, 3})
	require.NoError(t, QR(empty.Ptr(), ROnly, nil, tu.New(core.F32, []int64{0, 3, 3}).Ptr(), nil, nil))
}

// Empty matrices (a zero dimension) and many 1x1 ones.
func TestEdgeShapes(t *testing.T) {
	tu.ForEachBackend(t, func(t *testing.T, b tu.Backend) {
		for _, sh := range [][3]int64{{3, 0, 4}, {3, 4, 0}, {2, 0, 0}, {50, 1, 1}, {17, 1, 5}, {17, 5, 1}} {
			batch, m, n := sh[0], sh[1], sh[2]
			k := min(m, n)
			a := b.New(core.F32, []int64{batch, m, n})
			vals := a.Rand(tu.RNG(t), 1)
			q, r := b.New(core.F32, []int64{batch, m, k}), b.New(core.F32, []int64{batch, k, n})
			require.NoError(t, QR(a.Ptr(), Reduced, q.Ptr(), r.Ptr(), workspace(t, a, Reduced), nil), "%v", sh)
			check(t, fmt.Sprint(sh), vals, q.Values(), r.Values(), int(batch), int(m), int(n), int(k), int(k), eps(core.F32))
		}
	})
}

// The workspace: none on the CPU; on CUDA, matrices past 128 wide need it,
// and a missing or short one is refused with the outputs untouched.
func TestWorkspace(t *testing.T) {
	tu.ForEachBackend(t, func(t *testing.T, b tu.Backend) {
		a := b.New(core.F32, []int64{2, 200, 150})
		a.Rand(tu.RNG(t), 1)
		q, r := b.New(core.F32, []int64{2, 200, 150}), b.New(core.F32, []int64{2, 150, 150})
		need, err := WorkspaceSize(a.Ptr(), Reduced)
		require.NoError(t, err)
		if !b.GPU() {
			require.Zero(t, need)
			return
		}
		require.Positive(t, need)
		bq, br := q.Bytes(), r.Bytes()
		short := b.New(core.F32, []int64{need/4 - 1})
		for _, ws := range []*core.Tensor{nil, short.Ptr()} {
			err := QR(a.Ptr(), Reduced, q.Ptr(), r.Ptr(), ws, nil)
			require.Equal(t, core.ErrInvalidArgument, tu.Status(t, err), "%v", err)
			require.Equal(t, bq, q.Bytes())
			require.Equal(t, br, r.Bytes())
		}
		small, err := WorkspaceSize(b.New(core.F32, []int64{1000, 128, 128}).Ptr(), Complete)
		require.NoError(t, err)
		require.Zero(t, small, "matrices up to 128 wide need no workspace")
	})
}

// Batches whose outputs are all empty return at once, however large their
// sizes, without reading, writing or allocating anything: the descriptors
// have no data at all.
func TestEmptyOutputsAtOnce(t *testing.T) {
	desc := func(shape ...int64) *core.Tensor {
		return &core.Tensor{DeviceType: core.DeviceCPU, NDim: int32(len(shape)), Code: 2, Bits: 32, Lanes: 1, Shape: &shape[0]}
	}
	const big = 1 << 36
	for _, c := range []struct {
		a, q, r []int64
		mode    int32
	}{
		{[]int64{1, big, 0}, []int64{1, big, 0}, []int64{1, 0, 0}, Reduced},
		{[]int64{1, 0, big}, []int64{1, 0, 0}, []int64{1, 0, big}, Reduced},
		{[]int64{1, 0, big}, []int64{1, 0, 0}, []int64{1, 0, big}, Complete},
		{[]int64{1 << 28, 0, 5}, []int64{1 << 28, 0, 0}, []int64{1 << 28, 0, 5}, Reduced},
		{[]int64{1 << 28, 5, 0}, nil, []int64{1 << 28, 0, 0}, ROnly},
	} {
		var q *core.Tensor
		if c.q != nil {
			q = desc(c.q...)
		}
		require.NoError(t, QR(desc(c.a...), c.mode, q, desc(c.r...), nil, nil), "a %v mode %d", c.a, c.mode)
	}
}

// Complete mode of m x 0 matrices: q is the identity, r is empty.
func TestCompleteOfNoColumns(t *testing.T) {
	tu.ForEachBackend(t, func(t *testing.T, b tu.Backend) {
		a := b.New(core.F32, []int64{3, 4, 0})
		q, r := b.New(core.F32, []int64{3, 4, 4}), b.New(core.F32, []int64{3, 4, 0})
		q.Poison()
		require.NoError(t, QR(a.Ptr(), Complete, q.Ptr(), r.Ptr(), workspace(t, a, Complete), nil))
		got := q.Values()
		for i, v := range got {
			want := 0.0
			if i%16/4 == i%4 {
				want = 1
			}
			require.Equal(t, want, v, "q[%d]", i)
		}
	})
}

// Matrices past midSize with the default panels: several column chunks and
// row blocks of the trailing updates, split across the workers, tall and
// wide, reduced and complete, random and graded.
func TestLargeFactorizations(t *testing.T) {
	rng := tu.RNG(t)
	tu.ForEachBackend(t, func(t *testing.T, b tu.Backend) {
		for _, sh := range [][2]int{{600, 520}, {300, 700}} {
			m, n := sh[0], sh[1]
			for _, k := range []kind{random, graded} {
				for _, mode := range []int32{Reduced, Complete} {
					what := fmt.Sprintf("%dx%d kind %d mode %d", m, n, k, mode)
					qc, rr := min(m, n), min(m, n)
					if mode == Complete {
						qc, rr = m, m
					}
					a := b.New(core.F32, []int64{1, int64(m), int64(n)})
					av := a.Set(values(rng, k, 1, m, n)).Values()
					q, r := b.New(core.F32, []int64{1, int64(m), int64(qc)}), b.New(core.F32, []int64{1, int64(rr), int64(n)})
					require.NoError(t, QR(a.Ptr(), mode, q.Ptr(), r.Ptr(), workspace(t, a, mode), nil), what)
					check(t, what, av, q.Values(), r.Values(), 1, m, n, qc, rr, eps(core.F32))
				}
			}
		}
	})
}
