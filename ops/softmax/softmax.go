// Package softmax is softmax over the last dimension, forward and backward:
// validation, the CPU kernel and the float64 reference.
package softmax

import (
	"unsafe"

	"metalcore/encoder/cpu"
	"metalcore/encoder/cpu/simd"
	"metalcore/internal/core"
)

// Fwd: y = exp(x - max) / sum(exp(x - max)) per row. One pass keeps a
// running max and rescales the running sum (online softmax), a second
// writes the output, so x is read twice and y written once.
func Fwd(x, y *core.Tensor, enc unsafe.Pointer) error {
	var c core.Call
	xv := c.In("x", x)
	yv := c.Out("y", y)
	c.Check(func() error { return core.WantRows(xv) })
	c.Check(func() error { return core.LikeX(xv, yv) })
	c.AllowInPlace(yv, xv)
	if err := c.Done(enc); err != nil || xv.N == 0 {
		return err
	}
	cols := xv.Cols
	cpu.Parallel(xv.Rows, cpu.RowGrain(cols), func(lo, hi int, s *cpu.Scratch) {
		k := cpu.K()
		for r := lo; r < hi; r++ {
			x, y := cpu.RowSpan(xv, r), cpu.RowSpan(yv, r)
			m, sum := float32(0), float32(0)
			for off := 0; off < cols; off += cpu.Chunk {
				xs := x.Load(off, min(cpu.Chunk, cols-off), &s.B[0])
				cm := k.Max(xs)
				if off == 0 || cm > m {
					if off > 0 {
						sum *= simd.Exp32(m - cm)
					}
					m = cm
				}
				sum += k.ExpSum(xs, m)
			}
			inv := 1 / sum
			for off := 0; off < cols; off += cpu.Chunk {
				n := min(cpu.Chunk, cols-off)
				out := y.Out(off, n, &s.B[1])
				k.ExpScale(out, x.Load(off, n, &s.B[0]), m, inv)
				y.Store(off, out)
			}
		}
	})
	return nil
}

// Bwd: dx = y * (dy - sum(dy * y)) per row; dx may be dy.
func Bwd(dy, y, dx *core.Tensor, enc unsafe.Pointer) error {
	var c core.Call
	dyv := c.In("dy", dy)
	yv := c.In("y", y)
	dxv := c.Out("dx", dx)
	c.Check(func() error { return core.WantRows(dyv) })
	c.Check(func() error { return core.LikeX(yv, dyv, dxv) })
	c.AllowInPlace(dxv, dyv)
	if err := c.Done(enc); err != nil || yv.N == 0 {
		return err
	}
	cols := yv.Cols
	cpu.Parallel(yv.Rows, cpu.RowGrain(cols), func(lo, hi int, s *cpu.Scratch) {
		k := cpu.K()
		for r := lo; r < hi; r++ {
			dy, y, dx := cpu.RowSpan(dyv, r), cpu.RowSpan(yv, r), cpu.RowSpan(dxv, r)
			var d float32
			for off := 0; off < cols; off += cpu.Chunk {
				n := min(cpu.Chunk, cols-off)
				d += k.Dot(dy.Load(off, n, &s.B[0]), y.Load(off, n, &s.B[1]))
			}
			for off := 0; off < cols; off += cpu.Chunk {
				n := min(cpu.Chunk, cols-off)
				out := dx.Out(off, n, &s.B[2])
				k.SoftmaxGrad(out, y.Load(off, n, &s.B[1]), dy.Load(off, n, &s.B[0]), d)
				dx.Store(off, out)
			}
		}
	})
	return nil
}
