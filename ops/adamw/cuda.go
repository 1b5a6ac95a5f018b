package adamw

import (
	_ "embed"
	"unsafe"

	"metalcore/backend/cpu/simd"
	"metalcore/backend/cuda"
	"metalcore/backend/dialect"
	"metalcore/internal/core"
)

//go:embed adamw.cu
var kernels string

func init() {
	cuda.Register(kernels)
	step.Register(core.DeviceCUDA, stepCUDA)
}

// cudaBatch is the batch CUDA passes as the kernel parameter (adamw.cu's
// ADAMW_MAX there).
const cudaBatchMax = 512

var cudaBatch = layoutFor(cudaBatchMax)

// stepCUDA launches adamw_step once per batch of up to cudaBatch.max
// tensors, on the caller's stream; the tensor list travels in the kernel
// parameter.
func stepCUDA(h *simd.AdamW, groups []group, dev int, scale, inf *core.View, dyn *dynamic, enc unsafe.Pointer) error {
	var words [7*cudaBatchMax + batchTail]uint64
	l := cudaBatch
	tensor := func(g *group, k int) uint64 { return cuda.Ptr(g.ptr(k)) }
	view := func(v *core.View, at uint64) uint64 {
		if v == nil {
			return 0
		}
		return cuda.Ptr(unsafe.Add(v.Base, at))
	}
	for start := 0; start < len(groups); start += l.max {
		batch := groups[start:min(start+l.max, len(groups))]
		blocks := l.fill(words[:], batch, start, h, scale, inf, dyn, tensor, view)
		if err := cuda.LaunchStruct(dev, enc, dialect.Kernel("adamw_step", batch[0].dt), blocks, 256, words[:]); err != nil {
			return cuda.Backend(err)
		}
	}
	return nil
}
