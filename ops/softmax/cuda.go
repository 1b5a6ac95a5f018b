package softmax

import (
	_ "embed"
	"unsafe"

	"metalcore/backend/cuda"
	"metalcore/backend/dialect"
	"metalcore/internal/core"
)

//go:embed softmax.cu
var kernels string

func init() {
	cuda.Register(kernels)
	fwd.Register(core.DeviceCUDA, func(x, y *core.View, enc unsafe.Pointer) error {
		if lanes := shortRowLanes(x); lanes > 0 {
			return shortRows(fwdKernel(x, y)+"_short", x.DType, enc, lanes, x, y)
		}
		return rowKernel(fwdKernel(x, y), x.DType, enc, true, x, y)
	})
	bwd.Register(core.DeviceCUDA, func(dy, y, dx *core.View, enc unsafe.Pointer) error {
		if lanes := shortRowLanes(y); lanes > 0 {
			return shortRows(bwdKernel(y, dx)+"_short", dx.DType, enc, lanes, dy, y, dx)
		}
		return rowKernel(bwdKernel(y, dx), dx.DType, enc, false, dy, y, dx)
	})
}

// rowKernel launches a softmax row kernel over views (the first is the row
// shape), its instance for dtype dt, passing each view's pointer and row
// stride, then the width. A
// kernel taking several rows a block (ahead: cuda.RowsAhead picks the
// variant and grid) takes the row count before the width.
func rowKernel(name string, dt core.DType, enc unsafe.Pointer, ahead bool, vs ...*core.View) error {
	x := vs[0]
	args, err := rowArgs(vs)
	if err != nil {
		return err
	}
	dev, threads := int(x.DeviceID), dialect.RowThreads(x.Cols, x.DType, 4)
	kernel, blocks := dialect.Kernel(name, dt), x.Rows
	if ahead {
		if kernel, blocks, err = cuda.RowsAhead(dev, enc, name, dt, x.Rows, threads); err != nil {
			return cuda.Backend(err)
		}
		args = append(args, cuda.I32(x.Rows))
	}
	args = append(args, cuda.I32(x.Cols))
	return cuda.Backend(cuda.Launch(dev, enc, kernel, blocks, threads, args...))
}

// shortRows launches a short-rows kernel over views (the first is the row
// shape), its instance for dtype dt: each view's pointer and row stride,
// the rows, the width and the threads a row.
func shortRows(name string, dt core.DType, enc unsafe.Pointer, lanes int, vs ...*core.View) error {
	args, err := rowArgs(vs)
	if err != nil {
		return err
	}
	x := vs[0]
	perBlock := shortThreads / lanes
	args = append(args, cuda.I32(x.Rows), cuda.I32(x.Cols), cuda.I32(lanes))
	return cuda.Backend(cuda.Launch(int(x.DeviceID), enc, dialect.Kernel(name, dt), (x.Rows+perBlock-1)/perBlock,
		shortThreads, args...))
}

// rowArgs is each view's pointer and row stride, the row kernels' first
// arguments.
func rowArgs(vs []*core.View) ([]uint64, error) {
	strides, err := dialect.RowStrides(vs...)
	if err != nil {
		return nil, err
	}
	var args []uint64
	for i, v := range vs {
		args = append(args, cuda.Ptr(v.Base), cuda.I64(strides[i]))
	}
	return args, nil
}
