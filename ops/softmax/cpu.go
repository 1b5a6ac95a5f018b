package softmax

import (
	"math"
	"unsafe"

	"metalcore/backend/cpu"
	"metalcore/internal/core"
)

func init() {
	fwd.Register(core.DeviceCPU, fwdCPU)
	bwd.Register(core.DeviceCPU, bwdCPU)
}

// Scratch buffer slots of the row kernels.
const (
	bufX  = iota // x's row (forward)
	bufDY        // dy's row (backward)
	bufY         // y's row (backward)
	bufDX        // a 16-bit dx's row where dy is float32 (backward)
)

func fwdCPU(xv, yv *core.View, _ unsafe.Pointer) error {
	cols := xv.Cols
	cpu.Parallel(xv.Rows, cpu.RowGrain(cols), func(lo, hi int, s *cpu.Scratch) {
		k := cpu.K()
		for r := lo; r < hi; r++ {
			xs := cpu.RowSpan(xv, r).Load(0, s.Buf(bufX, cols))
			y := cpu.RowSpan(yv, r)
			e := y.Out(0, xs) // 16-bit: over x's float32 row, one buffer fewer in L1
			if m := k.Max(xs); cpu.Finite(m) {
				k.Normalize(e, e, nil, nil, 0, 1/k.ExpSum(e, xs, m))
			} else {
				cpu.Fill(e, float32(math.NaN()))
			}
			y.Store(0, e)
		}
	})
	return nil
}

func bwdCPU(dyv, yv, dxv *core.View, _ unsafe.Pointer) error {
	cols := yv.Cols
	cpu.Parallel(yv.Rows, cpu.RowGrain(cols), func(lo, hi int, s *cpu.Scratch) {
		k := cpu.K()
		for r := lo; r < hi; r++ {
			dys := cpu.RowSpan(dyv, r).Load(0, s.Buf(bufDY, cols))
			ys := cpu.RowSpan(yv, r).Load(0, s.Buf(bufY, cols))
			// a 16-bit dx is computed over dy's converted row, or in a scratch
			// row where dy is float32 (its row is dy's own memory)
			over := dys
			if dyv.DType != dxv.DType {
				over = s.Buf(bufDX, cols)
			}
			dx := cpu.RowSpan(dxv, r)
			out := dx.Out(0, over)
			k.SoftmaxGrad(out, ys, dys, k.Dot(dys, ys))
			dx.Store(0, out)
		}
	})
	return nil
}
