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
		return metal.DispatchBlocks(enc, "mc_cholesky", k, a.DType, metal.Buf(a), metal.Buf(l), metal.Buf(info),
			metal.I32(s.n), metal.I32(dialect.Flag(s.upper)), metal.I32(s.batch))
	})
}
