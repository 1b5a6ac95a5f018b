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
		return cuda.Backend(cuda.LaunchShared(int(a.DeviceID), enc, dialect.Kernel(k.kernel, a.DType), k.blocks,
			k.threads, k.shared, cuda.Ptr(a.Base), cuda.Ptr(l.Base), cuda.Ptr(info.Base), cuda.I32(s.n),
			cuda.I32(k.upper), cuda.I32(s.batch)))
	})
}
