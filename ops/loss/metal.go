package loss

import (
	"unsafe"

	"metalcore/backend/dialect"
	"metalcore/backend/metal"
	"metalcore/internal/core"
)

// maxMetalShared is a threadgroup's memory.
const maxMetalShared = 32 << 10

func init() {
	metal.Register("loss", kernels)
	crossEntropy.Register(core.DeviceMetal, func(x, t, scale, loss, g, lse *core.View, a args, enc unsafe.Pointer) error {
		k, err := gpuArgs(x, scale, loss, g, lse)
		if err != nil {
			return err
		}
		p, err := metal.NewPlan(enc)
		if err != nil {
			return err
		}
		// an absent tensor binds the logits' buffer (never read): Metal's
		// validation refuses a kernel's buffer left unbound
		buf := func(v *core.View) metal.Arg {
			if v == nil {
				return metal.Buf(x)
			}
			return metal.Buf(v)
		}
		kernel := dialect.Kernel("cross_entropy", x.DType)
		threads := p.Threads(kernel, dialect.RowThreads(x.Cols, x.DType, 4))
		spill := spillPieces(x, a, k.hasGrad == 1, threads, maxMetalShared)
		p.DispatchWith(kernel, x.Rows, threads, sharedBytes(spill, threads), nil, metal.Buf(x), metal.I64(k.strides[0]),
			metal.Buf(t), metal.I64(a.ignore), metal.F32(a.smoothing), buf(scale), metal.I32(k.hasScale), buf(loss), buf(g),
			metal.I64(k.strides[1]), metal.I32(k.hasGrad), buf(lse), metal.I32(int(a.stats)), metal.I32(x.Cols),
			metal.I32(spill))
		return p.Encode()
	})
	gradScale.Register(core.DeviceMetal, func(g, scale *core.View, enc unsafe.Pointer) error {
		p, err := metal.NewPlan(enc)
		if err != nil {
			return err
		}
		kernel := dialect.Kernel("loss_grad_scale", g.DType)
		p.Dispatch(kernel, scaleBlocks(g.N), p.Threads(kernel, scaleThreads), metal.Buf(g), metal.Buf(scale),
			metal.I64(int64(g.N)))
		return p.Encode()
	})
}
