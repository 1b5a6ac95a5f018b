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
		name, blocks, threads, shared, err := gpuLaunch(s, maxMetalOrder)
		if err != nil {
			return err
		}
		p, err := metal.NewPlan(enc)
		if err != nil {
			return err
		}
		kernel := dialect.Kernel(name, a.DType)
		if most := p.Threads(kernel, threads); most < threads { // whole simdgroups of 32
			if name == "cholesky_warp" || most < 32 {
				return core.Errorf(core.ErrUnsupportedDevice, "mc_cholesky: the device runs %s on at most %d threads "+
					"a threadgroup; it needs %d", kernel, most, threads)
			}
			threads = most &^ 31 // the block kernel loops over its warps
		}
		upper := 0
		if s.upper {
			upper = 1
		}
		p.DispatchWith(kernel, blocks, threads, shared, nil, metal.Buf(a), metal.Buf(l), metal.Buf(info),
			metal.I32(s.n), metal.I32(upper), metal.I32(s.batch))
		return p.Encode()
	})
}
