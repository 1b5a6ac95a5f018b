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
		return rowKernel(fwdKernel(x, y), x.DType, enc, true, x, y)
	})
	bwd.Register(core.DeviceCUDA, func(dy, y, dx *core.View, enc unsafe.Pointer) error {
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
	strides, err := dialect.RowStrides(vs...)
	if err != nil {
		return err
	}
	var args []uint64
	for i, v := range vs {
		args = append(args, cuda.Ptr(v.Base), cuda.I64(strides[i]))
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
