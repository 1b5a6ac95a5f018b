package activation

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"metalcore/internal/core"
	tu "metalcore/internal/testutil"
)

// Elementwise ops take any shape: the row shapes plus 0-d, 1-D and long flat
// tensors that cross many chunks.
var shapes = append([][]int64{{}, {1}, {5}, {4099}, {3, 70000}}, tu.Shapes...)

type fwdOp struct {
	name string
	run  func(x, y *core.Tensor) error
	ref  func(x float64) float64
}

type bwdOp struct {
	name string
	run  func(dy, x, dx *core.Tensor) error
	ref  func(dy, x float64) float64
}

func fwdOps() []fwdOp {
	var ops []fwdOp
	for _, a := range []int32{GeluErf, GeluTanh} {
		ops = append(ops, fwdOp{"gelu", func(x, y *core.Tensor) error { return GeluFwd(x, a, y, nil) },
			func(x float64) float64 { return RefGelu(x, a) }})
	}
	return append(ops, fwdOp{"silu", func(x, y *core.Tensor) error { return SiluFwd(x, y, nil) }, RefSilu})
}

func bwdOps() []bwdOp {
	var ops []bwdOp
	for _, a := range []int32{GeluErf, GeluTanh} {
		ops = append(ops, bwdOp{"gelu", func(dy, x, dx *core.Tensor) error { return GeluBwd(dy, x, a, dx, nil) },
			func(dy, x float64) float64 { return RefGeluGrad(dy, x, a) }})
	}
	return append(ops, bwdOp{"silu", func(dy, x, dx *core.Tensor) error { return SiluBwd(dy, x, dx, nil) }, RefSiluGrad})
}

func mapRef(xs []float64, f func(float64) float64) []float64 {
	out := make([]float64, len(xs))
	for i, v := range xs {
		out[i] = f(v)
	}
	return out
}

// tol allows the erf approximation's 1.5e-7 absolute error on top of the
// dtype's rounding.
func tol(dt core.DType) float64 { return tu.Tol(dt) + 1e-6 }

func TestForward(t *testing.T) {
	tu.Cases(t, shapes, func(t *testing.T, c tu.Case) {
		for _, op := range fwdOps() {
			x := c.New(c.Shape, 0)
			xs := x.Rand(tu.RNG(t), 3)
			y := c.New(c.Shape, 0)
			if c.InPlace {
				y = x
			}
			if stridedOnCUDA(t, c, op.run(x.Ptr(), y.Ptr())) {
				continue
			}
			tu.CloseScaled(t, op.name+" "+c.String(), y.Values(), mapRef(xs, op.ref), tol(c.DT), 1)
			require.True(t, y.PaddingPoisoned(), "%s %v: wrote outside y's elements", op.name, c)
		}
	})
}

func TestBackward(t *testing.T) {
	tu.Cases(t, shapes, func(t *testing.T, c tu.Case) {
		for _, op := range bwdOps() {
			rng := tu.RNG(t)
			dy, x := c.New(c.Shape, 0), c.New(c.Shape, 0)
			dyv, xs := dy.Rand(rng, 1), x.Rand(rng, 3)
			dx := c.New(c.Shape, 0)
			if c.InPlace {
				dx = dy
			}
			if stridedOnCUDA(t, c, op.run(dy.Ptr(), x.Ptr(), dx.Ptr())) {
				continue
			}
			want := make([]float64, len(xs))
			for i := range xs {
				want[i] = op.ref(dyv[i], xs[i])
			}
			tu.CloseScaled(t, op.name+" "+c.String(), dx.Values(), want, tol(c.DT), 1)
		}
	})
}

// stridedOnCUDA checks a call's error: the CUDA elementwise kernels take only
// contiguous tensors, so a strided case there must fail with
// ErrUnsupportedLayout (true: nothing to compare); anything else must succeed.
func stridedOnCUDA(t *testing.T, c tu.Case, err error) bool {
	t.Helper()
	if tu.OnCUDA() && c.NonContiguous() {
		require.Equal(t, core.ErrUnsupportedLayout, tu.Status(t, err), "%v: %v", c, err)
		return true
	}
	require.NoError(t, err, c)
	return false
}

// Extreme inputs: saturation in both directions, zero, infinities, NaN.
func TestExtremes(t *testing.T) {
	xs := []float64{-200, -90, -30, -10, -5, -1e-3, 0, 1e-3, 5, 10, 30, 90, 200,
		math.Inf(1), math.Inf(-1), math.NaN(), -0.5, 0.5, 3, -3}
	tu.ForEachBackend(t, func(t *testing.T) {
		for _, op := range fwdOps() {
			// x and a 16-lane copy so both the vector body and the tail run
			in := append(append([]float64(nil), xs...), xs...)
			x := tu.New(core.F32, []int64{int64(len(in))}).Set(in)
			y := tu.New(core.F32, []int64{int64(len(in))})
			require.NoError(t, op.run(x.Ptr(), y.Ptr()))
			for i, v := range y.Values() {
				want := op.ref(in[i])
				switch {
				case math.IsNaN(in[i]):
					require.True(t, math.IsNaN(v), "%s(NaN) = %v", op.name, v)
				case math.IsInf(in[i], 0):
					continue // inf * 0 forms: PyTorch itself returns NaN for some
				default:
					require.InDelta(t, want, v, 1e-6*(1+math.Abs(want)), "%s(%v)", op.name, in[i])
				}
			}
		}
	})
}
