package solve

import (
	_ "embed"
	"unsafe"

	"metalcore/backend/cuda"
	"metalcore/internal/core"
)

//go:embed solve.cu
var kernels string

// maxCUDAShared bounds the block kernel's shared memory (an H100 block may
// opt in to 227 KB): order 128 with up to 256 right-hand sides.
const maxCUDAShared = 200 << 10

func init() {
	cuda.Register(kernels)
	solve.Register(core.DeviceCUDA, func(s shapes, a, b, x, info *core.View, enc unsafe.Pointer) error {
		l, err := gpuLaunch(s, maxCUDAShared)
		if err != nil {
			return err
		}
		return cuda.LaunchBlocks(int(a.DeviceID), enc, l, a.DType, cuda.Ptr(a.Base), cuda.Ptr(b.Base), cuda.Ptr(x.Base),
			cuda.Ptr(info.Base), cuda.I32(s.n), cuda.I32(s.k), cuda.I32(s.batch))
	})
}
