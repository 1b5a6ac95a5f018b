package solve

import (
	"unsafe"

	"metalcore/backend/dialect"
	"metalcore/backend/metal"
	"metalcore/internal/core"
)

// maxMetalShared is a threadgroup's memory.
const maxMetalShared = 32 << 10

func init() {
	metal.Register("solve", kernels)
	solve.Register(core.DeviceMetal, func(s shapes, a, b, x, info *core.View, enc unsafe.Pointer) error {
		l, err := gpuLaunch(s, maxMetalShared)
		if err != nil {
			return err
		}
		p, err := metal.NewPlan(enc)
		if err != nil {
			return err
		}
		kernel := dialect.Kernel(l.kernel, a.DType)
		if most := p.Threads(kernel, l.threads); most < l.threads { // whole simdgroups of 32
			if l.kernel != "solve_block" || most < 32 {
				return core.Errorf(core.ErrUnsupportedDevice, "mc_solve: the device runs %s on at most %d threads "+
					"a threadgroup; it needs %d", kernel, most, l.threads)
			}
			l.threads = most &^ 31 // the block kernel loops over its threads
		}
		p.DispatchWith(kernel, l.blocks, l.threads, l.shared, nil, metal.Buf(a), metal.Buf(b), metal.Buf(x),
			metal.Buf(info), metal.I32(s.n), metal.I32(s.k), metal.I32(s.batch))
		return p.Encode()
	})
}
