// Package softmax is softmax over the last dimension, forward and backward:
// validation, the CPU kernel and the float64 reference.
package softmax

import (
	"math"
	"unsafe"

	"metalcore/encoder/cpu"
	"metalcore/internal/core"
)

// Fwd: y = exp(x - max) / sum(exp(x - max)) per row, y of x's dtype or
// float32 (a 16-bit x upcast, as softmax(x, dtype=torch.float32)). The
// exponentials are computed once, into float32 (y itself when it is
// float32), then scaled.
func Fwd(x, y *core.Tensor, enc unsafe.Pointer) error {
	var c core.Call
	xv := c.In("x", x)
	yv := c.Out("y", y)
	c.Check(func() error { return core.WantRows(xv) })
	c.Check(func() error { return core.SameShape(xv, yv) })
	c.Check(func() error {
		if yv.DType == core.F32 {
			return nil
		}
		return core.SameDType(xv, yv)
	})
	c.AllowInPlace(yv, xv)
	if err := c.Done(enc); err != nil || xv.N == 0 {
		return err
	}
	if xv.DeviceType == core.DeviceCUDA {
		name := "softmax_fwd"
		if yv.DType != xv.DType {
			name = "softmax_fwd_f32out"
		}
		return rowKernel(name, enc, true, xv, yv)
	}
	cols := xv.Cols
	cpu.Parallel(xv.Rows, cpu.RowGrain(cols), func(lo, hi int, s *cpu.Scratch) {
		k := cpu.K()
		for r := lo; r < hi; r++ {
			xs := cpu.RowSpan(xv, r).Load(0, s.Buf(0, cols))
			y := cpu.RowSpan(yv, r)
			e := y.Out(0, xs) // 16-bit: over x's float32 row, one buffer fewer in L1
			if m := k.Max(xs); finite(m) {
				k.Normalize(e, e, nil, nil, 0, 1/k.ExpSum(e, xs, m))
			} else {
				fill(e, float32(math.NaN()))
			}
			y.Store(0, e)
		}
	})
	return nil
}

// A row whose maximum is not finite (it holds a NaN or +inf, or is all
// -inf) is NaN throughout, as in float64 (inf - inf and NaN - NaN are NaN).
func finite(m float32) bool { return !math.IsInf(float64(m), 0) && m == m }

func fill(v []float32, f float32) {
	for i := range v {
		v[i] = f
	}
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
	if yv.DeviceType == core.DeviceCUDA {
		return rowKernel("softmax_bwd", enc, false, dyv, yv, dxv)
	}
	cols := yv.Cols
	cpu.Parallel(yv.Rows, cpu.RowGrain(cols), func(lo, hi int, s *cpu.Scratch) {
		k := cpu.K()
		for r := lo; r < hi; r++ {
			dys := cpu.RowSpan(dyv, r).Load(0, s.Buf(0, cols))
			ys := cpu.RowSpan(yv, r).Load(0, s.Buf(1, cols))
			dx := cpu.RowSpan(dxv, r)
			out := dx.Out(0, dys) // 16-bit: over dy's float32 row
			k.SoftmaxGrad(out, ys, dys, k.Dot(dys, ys))
			dx.Store(0, out)
		}
	})
	return nil
}
