package eigh

import (
	"unsafe"

	"metalcore/backend/dialect"
	"metalcore/backend/metal"
	"metalcore/internal/core"
)

// maxMetalShared is a threadgroup's memory.
const maxMetalShared = 32 << 10

func init() {
	metal.Register("eigh", kernels)
	decompose.Register(core.DeviceMetal, func(s shapes, a, w, v, info *core.View, enc unsafe.Pointer) error {
		l, err := gpuLaunch(s, maxMetalShared)
		if err != nil {
			return err
		}
		vb := metal.Buf(w) // bound where no eigenvectors are wanted, never written
		if v != nil {
			vb = metal.Buf(v)
		}
		return metal.DispatchBlocks(enc, "mc_eigh", l, a.DType, metal.Buf(a), metal.Buf(w), vb, metal.Buf(info),
			metal.I32(s.n), metal.I32(dialect.Flag(s.upper)), metal.I32(dialect.Flag(s.vectors)), metal.I32(s.batch))
	})
}
