// Package softmax is softmax over the last dimension, forward and backward:
// validation, dispatch to one implementation per device type (cpu.go,
// cuda.go) and the float64 reference (ref.go).
package softmax

import (
	"unsafe"

	"metalcore/internal/core"
)

var (
	fwd = core.NewDispatch[func(x, y *core.View, enc unsafe.Pointer) error]("softmax forward")
	bwd = core.NewDispatch[func(dy, y, dx *core.View, enc unsafe.Pointer) error]("softmax backward")
)

// Fwd: y = exp(x - max) / sum(exp(x - max)) per row, y of x's dtype or
// float32 (a 16-bit x upcast, as softmax(x, dtype=torch.float32)). The
// exponentials are computed once, into float32 (y itself when it is
// float32), then scaled.
func Fwd(x, y *core.Tensor, enc unsafe.Pointer) error {
	c := core.NewCall()
	defer c.Free()
	xv := c.In("x", x)
	yv := c.Out("y", y)
	c.Check(func() error { return core.WantRows(xv) })
	c.Check(func() error { return core.SameShape(xv, yv) })
	c.Check(func() error {
		if yv.DType == core.F32 {
			return nil
		}
		return core.SameDType(xv, yv)
	})
	c.AllowInPlace(yv, xv)
	f, err := core.Validated(c, enc, fwd)
	if err != nil || xv.N == 0 {
		return err
	}
	return f(xv, yv, enc)
}

// Bwd: dx = y * (dy - sum(dy * y)) per row; dx may be dy. dy and y share a
// dtype, and dx has it too, or is 16-bit where they are float32 (the
// gradient of the upcasting forward, in its input's dtype).
func Bwd(dy, y, dx *core.Tensor, enc unsafe.Pointer) error {
	c := core.NewCall()
	defer c.Free()
	dyv := c.In("dy", dy)
	yv := c.In("y", y)
	dxv := c.Out("dx", dx)
	c.Check(func() error { return core.WantRows(dyv) })
	c.Check(func() error { return core.LikeX(yv, dyv) })
	c.Check(func() error { return core.SameShape(yv, dxv) })
	c.Check(func() error {
		if yv.DType == core.F32 {
			return nil
		}
		return core.SameDType(yv, dxv)
	})
	if dxv != nil && dyv != nil && dxv.DType == dyv.DType {
		c.AllowInPlace(dxv, dyv)
	}
	f, err := core.Validated(c, enc, bwd)
	if err != nil || yv.N == 0 {
		return err
	}
	return f(dyv, yv, dxv, enc)
}

// fwdKernel is the GPU forward kernel for x and y: a float32 y of a 16-bit
// x takes the kernel that writes float32.
func fwdKernel(x, y *core.View) string {
	if y.DType != x.DType {
		return "softmax_fwd_f32out"
	}
	return "softmax_fwd"
}

// bwdKernel is the GPU backward kernel for y and dx, its instance chosen
// by dx's dtype: a 16-bit dx of float32 rows takes the kernel that reads
// float32.
func bwdKernel(y, dx *core.View) string {
	if dx.DType != y.DType {
		return "softmax_bwd_f32in"
	}
	return "softmax_bwd"
}

// The short-rows kernels (softmax.cu's softmax_short_rows and
// softmax_short_grad_rows) take rows of at most maxShortRow bytes (a
// 16-byte piece a thread, read element by element where a row is not
// whole aligned pieces; 32 pieces a warp), in blocks of shortThreads
// threads: on an H100 they beat the kernels of a block a row on such rows,
// of any width, not on longer ones (bench/python_ops.md). Metal runs the
// same kernels (checked on the simulator; not timed on an Apple GPU).
const (
	maxShortRow  = 512
	shortThreads = 128
)

// shortRowLanes is the threads a row of x (the forward's x, the
// backward's y) takes in the short-rows kernels (a power of two), or 0 for
// rows they do not take.
func shortRowLanes(x *core.View) int {
	bytes := x.Cols * x.DType.Size()
	if bytes > maxShortRow {
		return 0
	}
	lanes := 1
	for lanes*16 < bytes {
		lanes *= 2
	}
	return lanes
}
