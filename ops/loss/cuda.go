package loss

import (
	_ "embed"
	"unsafe"

	"metalcore/backend/cuda"
	"metalcore/backend/dialect"
	"metalcore/internal/core"
)

//go:embed loss.cu
var kernels string

func init() {
	cuda.Register(kernels)
	crossEntropy.Register(core.DeviceCUDA, func(x, t, scale, loss, g *core.View, a args, enc unsafe.Pointer) error {
		ptrs, strides, flags, err := gpuArgs(x, scale, g)
		if err != nil {
			return err
		}
		dev, threads := int(x.DeviceID), dialect.RowThreads(x.Cols, x.DType, 4)
		return cuda.Backend(cuda.Launch(dev, enc, dialect.Kernel("cross_entropy", x.DType), x.Rows, threads,
			cuda.Ptr(x.Base), cuda.I64(strides[0]), cuda.Ptr(t.Base), cuda.I64(a.ignore), cuda.F32(a.smoothing),
			cuda.Ptr(ptrs[0]), cuda.I32(flags[0]), cuda.Ptr(loss.Base), cuda.Ptr(ptrs[1]), cuda.I64(strides[1]),
			cuda.I32(flags[1]), cuda.I32(x.Cols)))
	})
}

// gpuArgs are what the kernel takes for the optional scale and gradient:
// their data (the logits' where one is absent, never read: a GPU binding
// is never left empty), the row strides of logits and gradient, and the
// has_scale and has_grad flags.
func gpuArgs(x, scale, g *core.View) (ptrs [2]unsafe.Pointer, strides [2]int64, flags [2]int, err error) {
	ptrs, rowsOf := [2]unsafe.Pointer{x.Base, x.Base}, []*core.View{x}
	if scale != nil { // has_scale: 1, one for every row; 2, one per row
		ptrs[0], flags[0] = scale.Base, 1
		if scale.N > 1 {
			flags[0] = 2
		}
	}
	if g != nil {
		ptrs[1], flags[1] = g.Base, 1
		rowsOf = append(rowsOf, g)
	}
	st, err := dialect.RowStrides(rowsOf...)
	if err != nil {
		return ptrs, strides, flags, err
	}
	strides[0] = st[0]
	if g != nil {
		strides[1] = st[1]
	}
	return ptrs, strides, flags, nil
}
