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
	crossEntropy.Register(core.DeviceCUDA, func(x, t, scale, loss, g, lse *core.View, a args, enc unsafe.Pointer) error {
		k, err := gpuArgs(x, scale, loss, g, lse)
		if err != nil {
			return err
		}
		dev, threads := int(x.DeviceID), dialect.RowThreads(x.Cols, x.DType, 4)
		if a.stats != noStats { // one pass: two blocks an SM, one's loads overlapping the other's reductions
			threads = min(threads, 512)
		}
		return cuda.Backend(cuda.Launch(dev, enc, dialect.Kernel("cross_entropy", x.DType), x.Rows, threads,
			cuda.Ptr(x.Base), cuda.I64(k.strides[0]), cuda.Ptr(t.Base), cuda.I64(a.ignore), cuda.F32(a.smoothing),
			cuda.Ptr(k.scale), cuda.I32(k.hasScale), cuda.Ptr(k.loss), cuda.Ptr(k.grad), cuda.I64(k.strides[1]),
			cuda.I32(k.hasGrad), cuda.Ptr(k.lse), cuda.I32(int(a.stats)), cuda.I32(x.Cols)))
	})
	gradScale.Register(core.DeviceCUDA, func(g, scale *core.View, enc unsafe.Pointer) error {
		return cuda.Backend(cuda.Launch(int(g.DeviceID), enc, dialect.Kernel("loss_grad_scale", g.DType),
			scaleBlocks(g.N), scaleThreads, cuda.Ptr(g.Base), cuda.Ptr(scale.Base), cuda.I64(int64(g.N))))
	})
}

// kernelArgs are what the kernel takes for the optional tensors: their data
// (the logits' where one is absent, never read: a GPU binding is never left
// empty), the row strides of logits and gradient, and the has_scale and
// has_grad flags.
type kernelArgs struct {
	scale, loss, grad, lse unsafe.Pointer
	strides                [2]int64
	hasScale, hasGrad      int
}

// gpuArgs are the kernel's arguments for the optional tensors.
func gpuArgs(x, scale, loss, g, lse *core.View) (k kernelArgs, err error) {
	data := func(v *core.View) unsafe.Pointer {
		if v == nil {
			return x.Base
		}
		return v.Base
	}
	k = kernelArgs{scale: data(scale), loss: data(loss), grad: data(g), lse: data(lse)}
	rowsOf := []*core.View{x}
	if scale != nil { // has_scale: 1, one for every row; 2, one per row
		k.hasScale = 1
		if scale.N > 1 {
			k.hasScale = 2
		}
	}
	if g != nil {
		k.hasGrad = 1
		rowsOf = append(rowsOf, g)
	}
	st, err := dialect.RowStrides(rowsOf...)
	if err != nil {
		return k, err
	}
	copy(k.strides[:], st)
	return k, nil
}
