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
		threads, shared, err := gpuLaunch(s.n, MaxGPUOrder)
		if err != nil {
			return err
		}
		upper := 0
		if s.upper {
			upper = 1
		}
		return cuda.Backend(cuda.LaunchShared(int(a.DeviceID), enc, dialect.Kernel("cholesky", a.DType), s.batch, threads,
			shared, cuda.Ptr(a.Base), cuda.Ptr(l.Base), cuda.Ptr(info.Base), cuda.I32(s.n), cuda.I32(upper)))
	})
}
