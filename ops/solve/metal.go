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
		// the block kernel loops over its threads
		if l.threads, err = p.WarpThreads("mc_solve", kernel, l.threads, l.kernel == "solve_block"); err != nil {
			return err
		}
		p.DispatchWith(kernel, l.blocks, l.threads, l.shared, nil, metal.Buf(a), metal.Buf(b), metal.Buf(x),
			metal.Buf(info), metal.I32(s.n), metal.I32(s.k), metal.I32(s.batch))
		return p.Encode()
	})
}
