package solve

import (
	"unsafe"

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
		return metal.DispatchBlocks(enc, "mc_solve", l, a.DType, metal.Buf(a), metal.Buf(b), metal.Buf(x),
			metal.Buf(info), metal.I32(s.n), metal.I32(s.k), metal.I32(s.batch))
	})
}
