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
		threads, shared, err := gpuLaunch(s.n, maxMetalOrder)
		if err != nil {
			return err
		}
		p, err := metal.NewPlan(enc)
		if err != nil {
			return err
		}
		kernel := dialect.Kernel("cholesky", a.DType)
		if most := p.Threads(kernel, threads); most < threads {
			threads = most // the kernel loops over its threads
		}
		upper := 0
		if s.upper {
			upper = 1
		}
		p.DispatchWith(kernel, s.batch, threads, shared, nil, metal.Buf(a), metal.Buf(l), metal.Buf(info),
			metal.I32(s.n), metal.I32(upper))
		return p.Encode()
	})
}
