// Package activation is the elementwise family: GELU (erf and tanh forms)
// and SiLU, forward and backward, on tensors of any shape: validation,
// dispatch to one implementation per device type (cpu.go, cuda.go) and the
// float64 references (ref.go).
package activation

import (
	"unsafe"

	"metalcore/backend/cpu/simd"
	"metalcore/internal/core"
)

// The implementations per device type. kernel names the pass (the CUDA
// kernel's name; the CPU's 16-bit tables are keyed by it), pick chooses its
// CPU primitive.
type (
	fwdImpl func(x, y *core.View, kernel string, pick func(*simd.Table) func(dst, x []float32), enc unsafe.Pointer) error
	bwdImpl func(dy, x, dx *core.View, kernel string, pick func(*simd.Table) func(dst, dy, x []float32), enc unsafe.Pointer) error
)

var (
	fwd = core.NewDispatch[fwdImpl]("activation forward")
	bwd = core.NewDispatch[bwdImpl]("activation backward")
)

// GELU approximations, as in the header.
const (
	GeluErf  = 0
	GeluTanh = 1
)

func checkApproximate(a int32) error {
	if a != GeluErf && a != GeluTanh {
		return core.Errorf(core.ErrInvalidArgument, "approximate is %d; it must be 0 (erf) or 1 (tanh)", a)
	}
	return nil
}

// The passes, each naming its CUDA kernel (one kernel per GELU form, so
// that neither form's registers limit the other's occupancy) and picking its
// CPU primitive; package-level, so a call builds no closure or name.
type (
	unaryPass struct {
		kernel string
		pick   func(*simd.Table) func(dst, x []float32)
	}
	gradPass struct {
		kernel string
		pick   func(*simd.Table) func(dst, dy, x []float32)
	}
)

var (
	geluFwd = [2]unaryPass{
		GeluErf:  {"gelu_fwd", func(k *simd.Table) func(dst, x []float32) { return k.GeluErf }},
		GeluTanh: {"gelu_tanh_fwd", func(k *simd.Table) func(dst, x []float32) { return k.GeluTanh }},
	}
	geluBwd = [2]gradPass{
		GeluErf:  {"gelu_bwd", func(k *simd.Table) func(dst, dy, x []float32) { return k.GeluErfGrad }},
		GeluTanh: {"gelu_tanh_bwd", func(k *simd.Table) func(dst, dy, x []float32) { return k.GeluTanhGrad }},
	}
	siluFwd = unaryPass{"silu_fwd", func(k *simd.Table) func(dst, x []float32) { return k.Silu }}
	siluBwd = gradPass{"silu_bwd", func(k *simd.Table) func(dst, dy, x []float32) { return k.SiluGrad }}
)

// GeluFwd: y = gelu(x).
func GeluFwd(x *core.Tensor, approximate int32, y *core.Tensor, enc unsafe.Pointer) error {
	if err := checkApproximate(approximate); err != nil {
		return err
	}
	return forward(x, y, enc, geluFwd[approximate])
}

// GeluBwd: dx = dy * gelu'(x).
func GeluBwd(dy, x *core.Tensor, approximate int32, dx *core.Tensor, enc unsafe.Pointer) error {
	if err := checkApproximate(approximate); err != nil {
		return err
	}
	return backward(dy, x, dx, enc, geluBwd[approximate])
}

// SiluFwd: y = x * sigmoid(x).
func SiluFwd(x, y *core.Tensor, enc unsafe.Pointer) error { return forward(x, y, enc, siluFwd) }

// SiluBwd: dx = dy * silu'(x).
func SiluBwd(dy, x, dx *core.Tensor, enc unsafe.Pointer) error {
	return backward(dy, x, dx, enc, siluBwd)
}

// forward validates a forward pass and runs its device's implementation.
func forward(x, y *core.Tensor, enc unsafe.Pointer, pass unaryPass) error {
	c := core.NewCall()
	defer c.Free()
	xv := c.In("x", x)
	yv := c.Out("y", y)
	c.Check(func() error { return core.LikeX(xv, yv) })
	c.AllowInPlace(yv, xv)
	f, err := core.Validated(c, enc, fwd)
	if err != nil || xv.N == 0 {
		return err
	}
	return f(xv, yv, pass.kernel, pass.pick, enc)
}

// backward validates a backward pass and runs its device's implementation.
func backward(dy, x, dx *core.Tensor, enc unsafe.Pointer, pass gradPass) error {
	c := core.NewCall()
	defer c.Free()
	dyv := c.In("dy", dy)
	xv := c.In("x", x)
	dxv := c.Out("dx", dx)
	c.Check(func() error { return core.LikeX(xv, dyv, dxv) })
	c.AllowInPlace(dxv, dyv)
	f, err := core.Validated(c, enc, bwd)
	if err != nil || xv.N == 0 {
		return err
	}
	return f(dyv, xv, dxv, pass.kernel, pass.pick, enc)
}
