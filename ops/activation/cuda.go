package activation

import (
	_ "embed"
	"unsafe"

	"metalcore/backend/cpu/simd"
	"metalcore/backend/cuda"
	"metalcore/backend/dialect"
	"metalcore/internal/core"
)

//go:embed activation.cu
var kernels string

func init() {
	cuda.Register(kernels)
	fwd.Register(core.DeviceCUDA, func(x, y *core.View, kernel string, _ func(*simd.Table) func(dst, x []float32), enc unsafe.Pointer) error {
		return elementwiseCUDA(kernel, enc, []*core.View{x, y})
	})
	bwd.Register(core.DeviceCUDA, func(dy, x, dx *core.View, kernel string, _ func(*simd.Table) func(dst, dy, x []float32), enc unsafe.Pointer) error {
		return elementwiseCUDA(kernel, enc, []*core.View{dy, x, dx})
	})
	gluFwd.Register(core.DeviceCUDA, func(g, u, y *core.View, p *gluPass, enc unsafe.Pointer) error {
		return elementwiseCUDA(p.fwdKernel, enc, []*core.View{g, u, y})
	})
	gluBwd.Register(core.DeviceCUDA, func(dy, g, u, dg, du *core.View, p *gluPass, enc unsafe.Pointer) error {
		return elementwiseCUDA(p.bwdKernel, enc, []*core.View{dy, g, u, dg, du})
	})
}

// elementwiseCUDA launches an elementwise kernel over contiguous views (the
// last is the output).
func elementwiseCUDA(name string, enc unsafe.Pointer, vs []*core.View) error {
	if err := core.WantContiguous(vs...); err != nil {
		return err
	}
	out := vs[len(vs)-1]
	var slots [6]uint64 // the tensors and the count: no allocation
	args := slots[:0]
	for _, v := range vs {
		args = append(args, cuda.Ptr(v.Base))
	}
	args = append(args, cuda.I64(int64(out.N)))
	pieces := (out.N + 7) / 8
	blocks := min((pieces+255)/256, 1<<16)
	return cuda.Backend(cuda.Launch(int(out.DeviceID), enc, dialect.Kernel(name, out.DType), blocks, 256, args...))
}
