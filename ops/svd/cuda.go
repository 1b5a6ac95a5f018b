package svd

import (
	_ "embed"
	"unsafe"

	"metalcore/backend/cuda"
	"metalcore/backend/dialect"
	"metalcore/internal/core"
)

//go:embed svd.cu
var kernels string

// maxCUDAShared bounds the kernel's shared memory (an H100 block may opt in
// to 227 KB): order 128 with its vectors.
const maxCUDAShared = 200 << 10

func init() {
	cuda.Register(kernels)
	decompose.Register(core.DeviceCUDA, func(s shapes, a, u, sv, vh, info *core.View, enc unsafe.Pointer) error {
		l, err := gpuLaunch(s, maxCUDAShared)
		if err != nil {
			return err
		}
		var up, vp unsafe.Pointer
		if u != nil {
			up, vp = u.Base, vh.Base
		}
		return cuda.LaunchBlocks(int(a.DeviceID), enc, l, a.DType, cuda.Ptr(a.Base), cuda.Ptr(up), cuda.Ptr(sv.Base),
			cuda.Ptr(vp), cuda.Ptr(info.Base), cuda.I32(s.m), cuda.I32(s.n), cuda.I32(dialect.Flag(s.vectors)),
			cuda.I32(s.batch))
	})
}
