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
		rows, pieces, err := l.work(x.DType)
		if err != nil {
			return err
		}
		p, err := metal.NewPlan(enc)
		if err != nil {
			return err
		}
		kernel := dialect.Kernel("rope", x.DType)
		threads := p.Threads(kernel, groupThreads)
		p.Dispatch(kernel, (pieces+threads-1)/threads, threads, metal.Buf(x), metal.I64(l.xsb), metal.I64(l.xsh),
			metal.I64(l.xst), metal.Buf(c), metal.I64(l.csb), metal.I64(l.cst), metal.Buf(s), metal.I64(l.ssb),
			metal.I64(l.sst), metal.Buf(y), metal.I64(l.ysb), metal.I64(l.ysh), metal.I64(l.yst), metal.I32(l.h), metal.I32(l.t), metal.I32(l.half), metal.I32(dialect.Flag(l.backward)),
			metal.I32(rows))
		return p.Encode()
	})
}
