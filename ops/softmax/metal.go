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
		if lanes := shortRowLanes(x); lanes > 0 {
			return shortRowsMetal(fwdKernel(x, y)+"_short", x.DType, enc, lanes, x, y)
		}
		return rowKernelMetal(fwdKernel(x, y), x.DType, enc, true, x, y)
	})
	bwd.Register(core.DeviceMetal, func(dy, y, dx *core.View, enc unsafe.Pointer) error {
		if lanes := shortRowLanes(y); lanes > 0 {
			return shortRowsMetal(bwdKernel(y, dx)+"_short", dx.DType, enc, lanes, dy, y, dx)
		}
		return rowKernelMetal(bwdKernel(y, dx), dx.DType, enc, false, dy, y, dx)
	})
}

// rowKernelMetal encodes a softmax row kernel over views (the first is the
// row shape), its instance for dtype dt, a threadgroup a row: each view's
// buffer and row stride, then
// (withRows: the forward kernels take it) the row count, then the width.
func rowKernelMetal(name string, dt core.DType, enc unsafe.Pointer, withRows bool, vs ...*core.View) error {
	x := vs[0]
	p, args, err := rowPlanMetal(enc, vs)
	if err != nil {
		return err
	}
	if withRows {
		args = append(args, metal.I32(x.Rows))
	}
	args = append(args, metal.I32(x.Cols))
	kernel := dialect.Kernel(name, dt)
	p.Dispatch(kernel, x.Rows, p.Threads(kernel, dialect.RowThreads(x.Cols, x.DType, 4)), args...)
	return p.Encode()
}

// shortRowsMetal encodes a short-rows kernel over views as shortRows
// launches it on CUDA, in threadgroups of up to shortThreads threads
// (whole SIMD groups).
func shortRowsMetal(name string, dt core.DType, enc unsafe.Pointer, lanes int, vs ...*core.View) error {
	x := vs[0]
	p, args, err := rowPlanMetal(enc, vs)
	if err != nil {
		return err
	}
	kernel := dialect.Kernel(name, dt)
	threads := max(p.Threads(kernel, shortThreads)&^31, 32)
	perGroup := threads / lanes
	p.Dispatch(kernel, (x.Rows+perGroup-1)/perGroup, threads,
		append(args, metal.I32(x.Rows), metal.I32(x.Cols), metal.I32(lanes))...)
	return p.Encode()
}

// rowPlanMetal is a plan on enc and the row kernels' first arguments: each
// view's buffer and row stride.
func rowPlanMetal(enc unsafe.Pointer, vs []*core.View) (*metal.Plan, []metal.Arg, error) {
	strides, err := dialect.RowStrides(vs...)
	if err != nil {
		return nil, nil, err
	}
	p, err := metal.NewPlan(enc)
	if err != nil {
		return nil, nil, err
	}
	var args []metal.Arg
	for i, v := range vs {
		args = append(args, metal.Buf(v), metal.I64(strides[i]))
	}
	return p, args, nil
}
