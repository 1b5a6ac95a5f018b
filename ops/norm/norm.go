// Package norm is the normalization family: RMSNorm (plain and fused with a
// residual add) and LayerNorm, forward and backward. It validates calls,
// runs the CPU kernels, and holds the float64 references the tests use.
//
// The CPU kernels work a row at a time on float32 views of the row: the
// tensor's own memory for float32, a per-worker buffer filled by one
// conversion for 16-bit dtypes. Weight and bias are converted once per call.
package norm

import (
	"math"
	"unsafe"

	"metalcore/encoder/cpu"
	"metalcore/encoder/cpu/simd"
	"metalcore/internal/core"
)

func checkEps(eps float32) error {
	if !(eps >= 0) || math.IsInf(float64(eps), 1) {
		return core.Errorf(core.ErrInvalidArgument, "eps is %g; it must be finite and >= 0", eps)
	}
	return nil
}

// rowInput registers the reduced input x and checks it has a last dimension.
func rowInput(c *core.Call, name string, t *core.Tensor) *core.View {
	x := c.In(name, t)
	c.Check(func() error { return core.WantRows(x) })
	return x
}

// Scratch buffer slots of the row kernels.
const (
	bufX = iota
	bufDY
	bufG
)

// RMSNormFwd: y = x / sqrt(mean(x^2) + eps) * weight, rstd saved per row.
func RMSNormFwd(x, weight *core.Tensor, eps float32, y, rstd *core.Tensor, enc unsafe.Pointer) error {
	var c core.Call
	xv := rowInput(&c, "x", x)
	wv := c.OptIn("weight", weight)
	yv := c.Out("y", y)
	rv := c.OptOut("rstd", rstd)
	c.Check(func() error { return checkEps(eps) })
	c.Check(func() error { return core.LikeX(xv, yv) })
	c.Check(func() error { return core.PerColumn(xv, wv) })
	c.Check(func() error { return core.RowStats(rv, xv) })
	c.AllowInPlace(yv, xv)
	if err := c.Done(enc); err != nil || xv.N == 0 {
		return err
	}
	if xv.DeviceType == core.DeviceCUDA {
		return rmsnormFwdCUDA(xv, wv, yv, rv, eps, enc)
	}
	vs, release := cpu.CallScratch()
	defer release()
	rs, w, cols := rowStats(rv, xv.Rows), cpu.Vector(wv, vs, 0), xv.Cols
	cpu.Parallel(xv.Rows, cpu.RowGrain(cols), func(lo, hi int, s *cpu.Scratch) {
		k := cpu.K()
		for r := lo; r < hi; r++ {
			x, y := cpu.RowSpan(xv, r), cpu.RowSpan(yv, r)
			var inv float32
			if x.DT == core.BF16 { // read and written as it is, no float32 copy
				x16 := x.U16(0, cols)
				inv = rmsInv(k.BF16Rows.SumSq(x16), cols, eps)
				k.BF16Rows.Normalize(y.U16(0, cols), x16, w, nil, 0, inv)
			} else {
				xs := x.Load(0, s.Buf(bufX, cols))
				inv = rmsInv(k.SumSq(xs), cols, eps)
				writeRow(y, xs, func(out []float32) { k.Normalize(out, xs, w, nil, 0, inv) })
			}
			if rs != nil {
				rs[r] = inv
			}
		}
	})
	return nil
}

// FusedAddRMSNormFwd: residual_out = x + residual (rounded to the dtype),
// y = rmsnorm(residual_out) * weight. The statistics use the rounded sum,
// so the result equals the unfused add followed by RMSNorm.
func FusedAddRMSNormFwd(x, residual, weight *core.Tensor, eps float32, y, residualOut, rstd *core.Tensor, enc unsafe.Pointer) error {
	var c core.Call
	xv := rowInput(&c, "x", x)
	resv := c.In("residual", residual)
	wv := c.OptIn("weight", weight)
	yv := c.Out("y", y)
	rov := c.Out("residual_out", residualOut)
	rv := c.OptOut("rstd", rstd)
	c.Check(func() error { return checkEps(eps) })
	c.Check(func() error { return core.LikeX(xv, resv, yv, rov) })
	c.Check(func() error { return core.PerColumn(xv, wv) })
	c.Check(func() error { return core.RowStats(rv, xv) })
	c.AllowInPlace(yv, xv)
	c.AllowInPlace(rov, resv)
	if err := c.Done(enc); err != nil || xv.N == 0 {
		return err
	}
	if xv.DeviceType == core.DeviceCUDA {
		return fusedAddRMSNormFwdCUDA(xv, resv, wv, yv, rov, rv, eps, enc)
	}
	vs, release := cpu.CallScratch()
	defer release()
	rs, w, cols := rowStats(rv, xv.Rows), cpu.Vector(wv, vs, 0), xv.Cols
	cpu.Parallel(xv.Rows, cpu.RowGrain(cols), func(lo, hi int, s *cpu.Scratch) {
		k := cpu.K()
		for r := lo; r < hi; r++ {
			x, res, ro, y := cpu.RowSpan(xv, r), cpu.RowSpan(resv, r), cpu.RowSpan(rov, r), cpu.RowSpan(yv, r)
			var inv float32
			if x.DT == core.BF16 { // read and written as they are, no float32 copies
				ro16 := ro.U16(0, cols)
				inv = rmsInv(k.BF16Rows.AddSumSq(ro16, x.U16(0, cols), res.U16(0, cols)), cols, eps)
				k.BF16Rows.Normalize(y.U16(0, cols), ro16, w, nil, 0, inv)
			} else {
				sum := ro.Out(0, s.Buf(bufG, cols))
				k.Add(sum, x.Load(0, s.Buf(bufX, cols)), res.Load(0, s.Buf(bufDY, cols)))
				ro.Store(0, sum)
				if ro.DT != core.F32 { // normalize what was stored: the rounded sum
					sum = ro.Load(0, sum)
				}
				inv = rmsInv(k.SumSq(sum), cols, eps)
				writeRow(y, sum, func(out []float32) { k.Normalize(out, sum, w, nil, 0, inv) })
			}
			if rs != nil {
				rs[r] = inv
			}
		}
	})
	return nil
}

// writeRow lets f compute a row of y into float32 memory and stores it.
// For a 16-bit y that memory is over, a row of scratch f reads elementwise
// (its input): writing over it keeps one buffer fewer in L1.
func writeRow(y cpu.Span, over []float32, f func(out []float32)) {
	out := y.Out(0, over)
	f(out)
	y.Store(0, out)
}

func rowStats(v *core.View, rows int) []float32 {
	if v == nil {
		return nil
	}
	return cpu.Float32s(v.Base, rows)
}

func rmsInv(ss float32, cols int, eps float32) float32 {
	return float32(1 / math.Sqrt(float64(ss)/float64(cols)+float64(eps)))
}

// LayerNormFwd: y = (x - mean) * rstd * weight + bias, mean and rstd saved.
func LayerNormFwd(x, weight, bias *core.Tensor, eps float32, y, mean, rstd *core.Tensor, enc unsafe.Pointer) error {
	var c core.Call
	xv := rowInput(&c, "x", x)
	wv := c.OptIn("weight", weight)
	bv := c.OptIn("bias", bias)
	yv := c.Out("y", y)
	mv := c.OptOut("mean", mean)
	rv := c.OptOut("rstd", rstd)
	c.Check(func() error { return checkEps(eps) })
	c.Check(func() error { return core.LikeX(xv, yv) })
	c.Check(func() error { return core.PerColumn(xv, wv, bv) })
	c.Check(func() error { return core.RowStats(mv, xv) })
	c.Check(func() error { return core.RowStats(rv, xv) })
	c.AllowInPlace(yv, xv)
	if err := c.Done(enc); err != nil || xv.N == 0 {
		return err
	}
	if xv.DeviceType == core.DeviceCUDA {
		return layernormFwdCUDA(xv, wv, bv, yv, mv, rv, eps, enc)
	}
	ms, rs := rowStats(mv, xv.Rows), rowStats(rv, xv.Rows)
	vs, release := cpu.CallScratch()
	defer release()
	w, b, cols := cpu.Vector(wv, vs, 0), cpu.Vector(bv, vs, 1), xv.Cols
	cpu.Parallel(xv.Rows, cpu.RowGrain(cols), func(lo, hi int, s *cpu.Scratch) {
		k := cpu.K()
		for r := lo; r < hi; r++ {
			x, y := cpu.RowSpan(xv, r), cpu.RowSpan(yv, r)
			var mu, inv float32
			if x.DT == core.BF16 { // read and written as it is, no float32 copy
				x16 := x.U16(0, cols)
				shift := simd.BF16ToF32(x16[0])
				sum, sq := k.BF16Rows.ShiftedSums(x16, shift)
				mu, inv = meanRstd(shift, sum, sq, cols, eps)
				k.BF16Rows.Normalize(y.U16(0, cols), x16, w, b, mu, inv)
			} else {
				xs := x.Load(0, s.Buf(bufX, cols))
				sum, sq := k.ShiftedSums(xs, xs[0])
				mu, inv = meanRstd(xs[0], sum, sq, cols, eps)
				writeRow(y, xs, func(out []float32) { k.Normalize(out, xs, w, b, mu, inv) })
			}
			if ms != nil {
				ms[r] = mu
			}
			if rs != nil {
				rs[r] = inv
			}
		}
	})
	return nil
}

// meanRstd is a row's mean and 1/sqrt(var + eps), from the sums of its cols
// elements shifted by its first element: the shift keeps both sums small
// when the mean is large against the spread, where plain sums lose the
// variance.
func meanRstd(shift, sum, sq float32, cols int, eps float32) (float32, float32) {
	n := float64(cols)
	m := float64(sum) / n
	variance := max(float64(sq)/n-m*m, 0)
	return float32(m + float64(shift)), float32(1 / math.Sqrt(variance+float64(eps)))
}
