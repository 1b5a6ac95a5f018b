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
		p, err := metal.NewPlan(enc)
		if err != nil {
			return err
		}
		kernel := dialect.Kernel(l.kernel, a.DType)
		// the block kernel loops over its threads; the warp kernel needs its SIMD groups whole
		if l.threads, err = p.WarpThreads("mc_eigh", kernel, l.threads, l.kernel == "eigh"); err != nil {
			return err
		}
		vb := metal.Buf(w) // bound where no eigenvectors are wanted, never written
		if v != nil {
			vb = metal.Buf(v)
		}
		p.DispatchWith(kernel, l.blocks, l.threads, l.shared, nil, metal.Buf(a), metal.Buf(w), vb, metal.Buf(info),
			metal.I32(s.n), metal.I32(upperFlag(s)), metal.I32(vectorsFlag(s)), metal.I32(s.batch))
		return p.Encode()
	})
}
