package rope

import (
	"unsafe"

	"metalcore/backend/dialect"
	"metalcore/backend/metal"
	"metalcore/internal/core"
)

func init() {
	metal.Register("rope", kernels)
	rope.Register(core.DeviceMetal, func(x, c, s, y *core.View, l *layout, enc unsafe.Pointer) error {
		if err := dialect.Fit32("x's rows and heads", l.b*l.h*l.t, l.h, l.t); err != nil {
			return err
		}
		p, err := metal.NewPlan(enc)
		if err != nil {
			return err
		}
		kernel := dialect.Kernel("rope", x.DType)
		p.Dispatch(kernel, l.b*l.h*l.t, p.Threads(kernel, threads(l)), metal.Buf(x), metal.I64(l.xsb), metal.I64(l.xsh),
			metal.I64(l.xst), metal.Buf(c), metal.I64(l.csb), metal.I64(l.cst), metal.Buf(s), metal.I64(l.ssb),
			metal.I64(l.sst), metal.Buf(y), metal.I32(l.h), metal.I32(l.t), metal.I32(l.half), metal.I32(flag(l.backward)))
		return p.Encode()
	})
}
