package loss

import (
	"unsafe"

	"metalcore/backend/dialect"
	"metalcore/backend/metal"
	"metalcore/internal/core"
)

func init() {
	metal.Register("loss", kernels)
	crossEntropy.Register(core.DeviceMetal, func(x, t, scale, loss, g *core.View, a args, enc unsafe.Pointer) error {
		_, strides, flags, err := gpuArgs(x, scale, g)
		if err != nil {
			return err
		}
		p, err := metal.NewPlan(enc)
		if err != nil {
			return err
		}
		// an absent scale or gradient binds the logits' buffer (never read):
		// Metal's validation refuses a kernel's buffer left unbound
		scaleBuf, gradBuf := metal.Buf(x), metal.Buf(x)
		if scale != nil {
			scaleBuf = metal.Buf(scale)
		}
		if g != nil {
			gradBuf = metal.Buf(g)
		}
		kernel := dialect.Kernel("cross_entropy", x.DType)
		p.Dispatch(kernel, x.Rows, p.Threads(kernel, dialect.RowThreads(x.Cols, x.DType, 4)),
			metal.Buf(x), metal.I64(strides[0]), metal.Buf(t), metal.I64(a.ignore), metal.F32(a.smoothing), scaleBuf,
			metal.I32(flags[0]), metal.Buf(loss), gradBuf, metal.I64(strides[1]), metal.I32(flags[1]), metal.I32(x.Cols))
		return p.Encode()
	})
}
