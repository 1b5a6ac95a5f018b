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
		kernel, blocks, threads, shared, err := gpuLaunch(s, MaxGPUOrder)
		if err != nil {
			return err
		}
		upper := 0
		if s.upper {
			upper = 1
		}
		return cuda.Backend(cuda.LaunchShared(int(a.DeviceID), enc, dialect.Kernel(kernel, a.DType), blocks, threads,
			shared, cuda.Ptr(a.Base), cuda.Ptr(l.Base), cuda.Ptr(info.Base), cuda.I32(s.n), cuda.I32(upper),
			cuda.I32(s.batch)))
	})
}
