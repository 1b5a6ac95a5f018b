// Package activation is the elementwise family: GELU (erf and tanh forms)
// and SiLU, forward and backward, on tensors of any shape: validation,
// dispatch to one implementation per device type (cpu.go, cuda.go) and the
// float64 references (ref.go).
package activation

import (
	"unsafe"

	"metalcore/encoder/cpu/simd"
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

// GeluFwd: y = gelu(x).
func GeluFwd(x *core.Tensor, approximate int32, y *core.Tensor, enc unsafe.Pointer) error {
	if err := checkApproximate(approximate); err != nil {
		return err
	}
	return forward(x, y, enc, geluKernel("fwd", approximate), func(k *simd.Table) func(dst, x []float32) {
		if approximate == GeluTanh {
			return k.GeluTanh
		}
		return k.GeluErf
	})
}

// GeluBwd: dx = dy * gelu'(x).
func GeluBwd(dy, x *core.Tensor, approximate int32, dx *core.Tensor, enc unsafe.Pointer) error {
	if err := checkApproximate(approximate); err != nil {
		return err
	}
	return backward(dy, x, dx, enc, geluKernel("bwd", approximate), func(k *simd.Table) func(dst, dy, x []float32) {
		if approximate == GeluTanh {
			return k.GeluTanhGrad
		}
		return k.GeluErfGrad
	})
}

// SiluFwd: y = x * sigmoid(x).
func SiluFwd(x, y *core.Tensor, enc unsafe.Pointer) error {
	return forward(x, y, enc, "silu_fwd", func(k *simd.Table) func(dst, x []float32) { return k.Silu })
}

// SiluBwd: dx = dy * silu'(x).
func SiluBwd(dy, x, dx *core.Tensor, enc unsafe.Pointer) error {
	return backward(dy, x, dx, enc, "silu_bwd", func(k *simd.Table) func(dst, dy, x []float32) { return k.SiluGrad })
}

// geluKernel is the CUDA kernel of GELU's pass ("fwd", "bwd") in the
// approximation's form: one kernel per form, so that neither form's
// registers limit the other's occupancy.
func geluKernel(pass string, approximate int32) string {
	if approximate == GeluTanh {
		return "gelu_tanh_" + pass
	}
	return "gelu_" + pass
}

// forward validates a forward pass and runs its device's implementation.
func forward(x, y *core.Tensor, enc unsafe.Pointer, kernel string, pick func(*simd.Table) func(dst, x []float32)) error {
	var c core.Call
	xv := c.In("x", x)
	yv := c.Out("y", y)
	c.Check(func() error { return core.LikeX(xv, yv) })
	c.AllowInPlace(yv, xv)
	f, err := core.Validated(&c, enc, fwd)
	if err != nil || xv.N == 0 {
		return err
	}
	return f(xv, yv, kernel, pick, enc)
}

// backward validates a backward pass and runs its device's implementation.
func backward(dy, x, dx *core.Tensor, enc unsafe.Pointer, kernel string, pick func(*simd.Table) func(dst, dy, x []float32)) error {
	var c core.Call
	dyv := c.In("dy", dy)
	xv := c.In("x", x)
	dxv := c.Out("dx", dx)
	c.Check(func() error { return core.LikeX(xv, dyv, dxv) })
	c.AllowInPlace(dxv, dyv)
	f, err := core.Validated(&c, enc, bwd)
	if err != nil || xv.N == 0 {
		return err
	}
	return f(dyv, xv, dxv, kernel, pick, enc)
}
