package cholesky

import (
	_ "embed"
	"unsafe"

	"metalcore/backend/cuda"
	"metalcore/backend/dialect"
	"metalcore/internal/core"
)

//go:embed cholesky.cu
var kernels string

func init() {
	cuda.Register(kernels)
	factor.Register(core.DeviceCUDA, func(s shapes, a, l, info *core.View, enc unsafe.Pointer) error {
		k, err := gpuLaunch(s, maxCUDAOrder)
		if err != nil {
			return err
		}
		return cuda.LaunchBlocks(int(a.DeviceID), enc, k, a.DType, cuda.Ptr(a.Base), cuda.Ptr(l.Base),
			cuda.Ptr(info.Base), cuda.I32(s.n), cuda.I32(dialect.Flag(s.upper)), cuda.I32(s.batch))
	})
}
