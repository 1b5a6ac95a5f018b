package rope

import (
	_ "embed"
	"unsafe"

	"metalcore/backend/cuda"
	"metalcore/backend/dialect"
	"metalcore/internal/core"
)

//go:embed rope.cu
var kernels string

func init() {
	cuda.Register(kernels)
	rope.Register(core.DeviceCUDA, func(x, c, s, y *core.View, l *layout, enc unsafe.Pointer) error {
		rows, pieces, err := l.work(x.DType)
		if err != nil {
			return err
		}
		return cuda.Backend(cuda.Launch(int(x.DeviceID), enc, dialect.Kernel("rope", x.DType), (pieces+groupThreads-1)/groupThreads,
			groupThreads, cuda.Ptr(x.Base), cuda.I64(l.xsb), cuda.I64(l.xsh), cuda.I64(l.xst), cuda.Ptr(c.Base),
			cuda.I64(l.csb), cuda.I64(l.cst), cuda.Ptr(s.Base), cuda.I64(l.ssb), cuda.I64(l.sst), cuda.Ptr(y.Base),
			cuda.I64(l.ysb), cuda.I64(l.ysh), cuda.I64(l.yst), cuda.I32(l.h), cuda.I32(l.t), cuda.I32(l.half), cuda.I32(dialect.Flag(l.backward)), cuda.I32(rows)))
	})
}
