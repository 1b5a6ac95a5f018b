package cholesky

import (
	"unsafe"

	"metalcore/backend/dialect"
	"metalcore/backend/metal"
	"metalcore/internal/core"
)

// maxMetalOrder keeps a matrix (n (n + 1) floats) in a threadgroup's 32 KB.
const maxMetalOrder = 64

func init() {
	metal.Register("cholesky", kernels)
	factor.Register(core.DeviceMetal, func(s shapes, a, l, info *core.View, enc unsafe.Pointer) error {
		k, err := gpuLaunch(s, maxMetalOrder)
		if err != nil {
			return err
		}
		p, err := metal.NewPlan(enc)
		if err != nil {
			return err
		}
		kernel := dialect.Kernel(k.kernel, a.DType)
		// the block kernel loops over its warps
		if k.threads, err = p.WarpThreads("mc_cholesky", kernel, k.threads, k.kernel == "cholesky"); err != nil {
			return err
		}
		p.DispatchWith(kernel, k.blocks, k.threads, k.shared, nil, metal.Buf(a), metal.Buf(l), metal.Buf(info),
			metal.I32(s.n), metal.I32(k.upper), metal.I32(s.batch))
		return p.Encode()
	})
}
