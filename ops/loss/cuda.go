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

// maxCUDAShared bounds the shared memory a row's block keeps of the row (an
// H100 block may opt in to 227 KB): a 128256-wide bfloat16 row with the
// registers' part.
const maxCUDAShared = 200 << 10

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
		spill := spillPieces(x, a, k.hasGrad == 1, threads, maxCUDAShared)
		return cuda.Backend(cuda.LaunchShared(dev, enc, dialect.Kernel("cross_entropy", x.DType), x.Rows, threads,
			sharedBytes(spill, threads), cuda.Ptr(x.Base), cuda.I64(k.strides[0]), cuda.Ptr(t.Base), cuda.I64(a.ignore),
			cuda.F32(a.smoothing), cuda.Ptr(k.scale), cuda.I32(k.hasScale), cuda.Ptr(k.loss), cuda.Ptr(k.grad),
			cuda.I64(k.strides[1]), cuda.I32(k.hasGrad), cuda.Ptr(k.lse), cuda.I32(int(a.stats)), cuda.I32(x.Cols),
			cuda.I32(spill)))
	})
	gradScale.Register(core.DeviceCUDA, func(g, scale *core.View, enc unsafe.Pointer) error {
		return cuda.Backend(cuda.Launch(int(g.DeviceID), enc, dialect.Kernel("loss_grad_scale", g.DType),
			scaleBlocks(g.N), scaleThreads, cuda.Ptr(g.Base), cuda.Ptr(scale.Base), cuda.I64(int64(g.N))))
	})
}
