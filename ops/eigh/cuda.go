package eigh

import (
	_ "embed"
	"unsafe"

	"metalcore/backend/cuda"
	"metalcore/backend/dialect"
	"metalcore/internal/core"
)

//go:embed eigh.cu
var kernels string

// maxCUDAShared bounds the kernel's shared memory (an H100 block may opt in
// to 227 KB): order 128 with its eigenvectors.
const maxCUDAShared = 200 << 10

func init() {
	cuda.Register(kernels)
	decompose.Register(core.DeviceCUDA, func(s shapes, a, w, v, info *core.View, enc unsafe.Pointer) error {
		l, err := gpuLaunch(s, maxCUDAShared)
		if err != nil {
			return err
		}
		var vp unsafe.Pointer
		if v != nil {
			vp = v.Base
		}
		return cuda.LaunchBlocks(int(a.DeviceID), enc, l, a.DType, cuda.Ptr(a.Base), cuda.Ptr(w.Base), cuda.Ptr(vp),
			cuda.Ptr(info.Base), cuda.I32(s.n), cuda.I32(dialect.Flag(s.upper)), cuda.I32(dialect.Flag(s.vectors)), cuda.I32(s.batch))
	})
}
