package svd

import (
	"unsafe"

	"metalcore/backend/dialect"
	"metalcore/backend/metal"
	"metalcore/internal/core"
)

// maxMetalShared is a threadgroup's memory.
const maxMetalShared = 32 << 10

func init() {
	metal.Register("svd", kernels)
	decompose.Register(core.DeviceMetal, func(s shapes, a, u, sv, vh, info *core.View, enc unsafe.Pointer) error {
		l, err := gpuLaunch(s, maxMetalShared)
		if err != nil {
			return err
		}
		ub, vb := metal.Buf(sv), metal.Buf(sv) // bound where no vectors are wanted, never written
		if u != nil {
			ub, vb = metal.Buf(u), metal.Buf(vh)
		}
		return metal.DispatchBlocks(enc, "mc_svd", l, a.DType, metal.Buf(a), ub, metal.Buf(sv), vb, metal.Buf(info),
			metal.I32(s.m), metal.I32(s.n), metal.I32(dialect.Flag(s.vectors)), metal.I32(s.batch))
	})
}
