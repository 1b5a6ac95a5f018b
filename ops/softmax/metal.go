package softmax

import (
	"unsafe"

	"metalcore/backend/dialect"
	"metalcore/backend/metal"
	"metalcore/internal/core"
)

func init() {
	metal.Register("softmax", kernels)
	fwd.Register(core.DeviceMetal, func(x, y *core.View, enc unsafe.Pointer) error {
		return rowKernelMetal(fwdKernel(x, y), x.DType, enc, true, x, y)
	})
	bwd.Register(core.DeviceMetal, func(dy, y, dx *core.View, enc unsafe.Pointer) error {
		return rowKernelMetal(bwdKernel(y, dx), dx.DType, enc, false, dy, y, dx)
	})
}

// rowKernelMetal encodes a softmax row kernel over views (the first is the
// row shape), its instance for dtype dt, a threadgroup a row: each view's
// buffer and row stride, then
// (withRows: the forward kernels take it) the row count, then the width.
func rowKernelMetal(name string, dt core.DType, enc unsafe.Pointer, withRows bool, vs ...*core.View) error {
	x := vs[0]
	strides, err := dialect.RowStrides(vs...)
	if err != nil {
		return err
	}
	p, err := metal.NewPlan(enc)
	if err != nil {
		return err
	}
	var args []metal.Arg
	for i, v := range vs {
		args = append(args, metal.Buf(v), metal.I64(strides[i]))
	}
	if withRows {
		args = append(args, metal.I32(x.Rows))
	}
	args = append(args, metal.I32(x.Cols))
	kernel := dialect.Kernel(name, dt)
	p.Dispatch(kernel, x.Rows, p.Threads(kernel, dialect.RowThreads(x.Cols, x.DType, 4)), args...)
	return p.Encode()
}
