package activation

import (
	"unsafe"

	"metalcore/backend/cpu/simd"
	"metalcore/backend/dialect"
	"metalcore/backend/metal"
	"metalcore/internal/core"
)

func init() {
	metal.Register("activation", kernels)
	fwd.Register(core.DeviceMetal, func(x, y *core.View, kernel string, _ func(*simd.Table) func(dst, x []float32), enc unsafe.Pointer) error {
		return elementwiseMetal(kernel, enc, x, y)
	})
	bwd.Register(core.DeviceMetal, func(dy, x, dx *core.View, kernel string, _ func(*simd.Table) func(dst, dy, x []float32), enc unsafe.Pointer) error {
		return elementwiseMetal(kernel, enc, dy, x, dx)
	})
	gluFwd.Register(core.DeviceMetal, func(g, u, y *core.View, p *gluPass, enc unsafe.Pointer) error {
		return elementwiseMetal(p.fwdKernel, enc, g, u, y)
	})
	gluBwd.Register(core.DeviceMetal, func(dy, g, u, dg, du *core.View, p *gluPass, enc unsafe.Pointer) error {
		return elementwiseMetal(p.bwdKernel, enc, dy, g, u, dg, du)
	})
}

// elementwiseMetal encodes an elementwise kernel over contiguous views (the
// last is the output), with the CUDA launch's grid: 256-thread groups over
// 8-element pieces, grid-stride past 65536 groups.
func elementwiseMetal(name string, enc unsafe.Pointer, vs ...*core.View) error {
	if err := core.WantContiguous(vs...); err != nil {
		return err
	}
	p, err := metal.NewPlan(enc)
	if err != nil {
		return err
	}
	out := vs[len(vs)-1]
	args := make([]metal.Arg, 0, 6)
	for _, v := range vs {
		args = append(args, metal.Buf(v))
	}
	pieces := (out.N + 7) / 8
	kernel := dialect.Kernel(name, out.DType)
	p.Dispatch(kernel, min((pieces+255)/256, 1<<16), p.Threads(kernel, 256), append(args, metal.I64(int64(out.N)))...)
	return p.Encode()
}
