package activation

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"metalcore/backend/cpu/simd"
	"metalcore/internal/core"
	tu "metalcore/tests/testutil"
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
	if c.Backend.GPU() && c.NonContiguous() {
		require.Equal(t, core.ErrUnsupportedLayout, tu.Status(t, err), "%v: %v", c, err)
		return true
	}
	require.NoError(t, err, c)
	return false
}

// Extreme inputs: saturation in both directions, zero, infinities,
// FLT_MAX, NaN, every dtype, forward and backward: NaN exactly where
// PyTorch's float32 formulas give NaN (Torch*32), the same infinity where
// they give one, and elsewhere the float64 reference's value.
func TestExtremes(t *testing.T) {
	const fmax = math.MaxFloat32
	xs := []float64{-200, -90, -88.5, -30, -10, -5, -1e-3, 0, 1e-3, 5, 10, 30, 88.5, 90, 200, -1e10, 1e10,
		-1e20, 1e20, -1e30, 1e30, -3e38, 3e38, -fmax, fmax, math.Inf(1), math.Inf(-1), math.NaN(), -0.5, 0.5, 3, -3}
	in := append(append([]float64(nil), xs...), xs...) // the vector body and the tail both run
	const dyv = 1.5
	type op struct {
		name string
		run  func(x, dy, out *core.Tensor) error
		ref  func(x float32) float32 // PyTorch's
		f64  func(x float64) float64
	}
	var ops []op
	for _, a := range []int32{GeluErf, GeluTanh} {
		form := map[int32]string{GeluErf: "(erf)", GeluTanh: "(tanh)"}[a]
		ops = append(ops, op{"gelu" + form, func(x, _, y *core.Tensor) error { return GeluFwd(x, a, y, nil) },
			func(x float32) float32 { return TorchGelu32(x, a) }, func(x float64) float64 { return RefGelu(x, a) }},
			op{"gelu" + form + " backward", func(x, dy, dx *core.Tensor) error { return GeluBwd(dy, x, a, dx, nil) },
				func(x float32) float32 { return TorchGeluGrad32(dyv, x, a) },
				func(x float64) float64 { return RefGeluGrad(dyv, x, a) }})
	}
	ops = append(ops, op{"silu", func(x, _, y *core.Tensor) error { return SiluFwd(x, y, nil) }, TorchSilu32, RefSilu},
		op{"silu backward", func(x, dy, dx *core.Tensor) error { return SiluBwd(dy, x, dx, nil) },
			func(x float32) float32 { return TorchSiluGrad32(dyv, x) },
			func(x float64) float64 { return RefSiluGrad(dyv, x) }})
	tu.ForEachBackend(t, func(t *testing.T, b tu.Backend) {
		for _, dt := range tu.DTypes {
			for _, o := range ops {
				n := []int64{int64(len(in))}
				x := b.New(dt, n)
				stored := x.Set(in).Values()
				dy := b.New(dt, n).Set(mapRef(in, func(float64) float64 { return dyv }))
				out := b.New(dt, n)
				require.NoError(t, o.run(x.Ptr(), dy.Ptr(), out.Ptr()))
				for j, got := range out.Values() {
					torch := tu.Round(dt, float64(o.ref(float32(stored[j]))))
					what := fmt.Sprintf("%s %s at %g: got %g, PyTorch's formula %g", o.name, dt, stored[j], got, torch)
					if math.IsNaN(torch) || math.IsInf(torch, 0) {
						require.True(t, math.IsNaN(got) == math.IsNaN(torch) && (math.IsNaN(got) || got == torch), what)
						continue
					}
					want := tu.Round(dt, o.f64(stored[j]))
					require.InDelta(t, want, got, tol(dt)*(1+math.Abs(want)), "%s, float64 %g", what, want)
				}
			}
		}
	})
}

// 16-bit results are the portable float32 kernel's, rounded, whichever
// instruction set is active (and was active when the table was built).
func TestTablesIndependentOfISA(t *testing.T) {
	all := make([]float64, 1<<16)
	tu.ForEachISA(t, func(t *testing.T) {
		for _, dt := range []core.DType{core.BF16, core.F16} {
			x := tu.New(dt, []int64{1 << 16})
			for i := range all {
				all[i] = float64(simd.BF16ToF32(uint16(i)))
				if dt == core.F16 {
					all[i] = float64(simd.F16ToF32(uint16(i)))
				}
			}
			x.Set(all)
			in := x.Values()
			for _, f := range []struct {
				name   string
				run    func(x, y *core.Tensor) error
				scalar func(float32) float32
			}{
				{"gelu(erf)", func(x, y *core.Tensor) error { return GeluFwd(x, GeluErf, y, nil) }, simd.GeluErf32},
				{"gelu(tanh)", func(x, y *core.Tensor) error { return GeluFwd(x, GeluTanh, y, nil) }, simd.GeluTanh32},
				{"silu", func(x, y *core.Tensor) error { return SiluFwd(x, y, nil) }, simd.Silu32},
			} {
				y := tu.New(dt, []int64{1 << 16})
				require.NoError(t, f.run(x.Ptr(), y.Ptr()))
				for i, got := range y.Values() {
					want := tu.Round(dt, float64(f.scalar(float32(in[i]))))
					if !(got == want || math.IsNaN(got) && math.IsNaN(want)) {
						t.Fatalf("%s %s(%g) = %g, the portable kernel's %g", f.name, dt, in[i], got, want)
					}
				}
			}
		}
	})
}
