// Package norm is the normalization family: RMSNorm (plain and fused with a
// residual add) and LayerNorm, forward and backward. It validates calls,
// runs the CPU kernels, and holds the float64 references the tests use.
package norm

import (
	"math"
	"unsafe"

	"metalcore/encoder/cpu"
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
	rs := rowStats(rv, xv.Rows)
	cpu.Parallel(xv.Rows, cpu.RowGrain(xv.Cols), func(lo, hi int, s *cpu.Scratch) {
		w := cpu.OptRowSpan(wv, 0)
		for r := lo; r < hi; r++ {
			x, y := cpu.RowSpan(xv, r), cpu.RowSpan(yv, r)
			inv := rmsInv(sumSq(x, xv.Cols, s), xv.Cols, eps)
			scaleRow(y, x, w, xv.Cols, inv, s)
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
	rs := rowStats(rv, xv.Rows)
	k := cpu.K()
	cols := xv.Cols
	cpu.Parallel(xv.Rows, cpu.RowGrain(cols), func(lo, hi int, s *cpu.Scratch) {
		w := cpu.OptRowSpan(wv, 0)
		for r := lo; r < hi; r++ {
			x, res, ro, y := cpu.RowSpan(xv, r), cpu.RowSpan(resv, r), cpu.RowSpan(rov, r), cpu.RowSpan(yv, r)
			var ss float32
			for off := 0; off < cols; off += cpu.Chunk {
				n := min(cpu.Chunk, cols-off)
				xs, rsv := x.Load(off, n, &s.B[0]), res.Load(off, n, &s.B[1])
				sum := ro.Out(off, n, &s.B[2])
				k.Add(sum, xs, rsv)
				ro.Store(off, sum)
				ss += k.SumSq(ro.Load(off, n, &s.B[2])) // the rounded values
			}
			inv := rmsInv(ss, cols, eps)
			scaleRow(y, ro, w, cols, inv, s)
			if rs != nil {
				rs[r] = inv
			}
		}
	})
	return nil
}

func rowStats(v *core.View, rows int) []float32 {
	if v == nil {
		return nil
	}
	return cpu.Float32s(v.Base, rows)
}

func sumSq(x cpu.Span, cols int, s *cpu.Scratch) float32 {
	var ss float32
	for off := 0; off < cols; off += cpu.Chunk {
		ss += cpu.K().SumSq(x.Load(off, min(cpu.Chunk, cols-off), &s.B[0]))
	}
	return ss
}

func rmsInv(ss float32, cols int, eps float32) float32 {
	return float32(1 / math.Sqrt(float64(ss)/float64(cols)+float64(eps)))
}

// scaleRow writes y = x * inv * w over one row (w optional).
func scaleRow(y, x, w cpu.Span, cols int, inv float32, s *cpu.Scratch) {
	normalizeRow(y, x, w, cpu.Span{}, cols, 0, inv, s)
}

// normalizeRow writes y = (x - mean) * rstd * w + b over one row.
func normalizeRow(y, x, w, b cpu.Span, cols int, mean, rstd float32, s *cpu.Scratch) {
	k := cpu.K()
	for off := 0; off < cols; off += cpu.Chunk {
		n := min(cpu.Chunk, cols-off)
		out := y.Out(off, n, &s.B[3])
		k.Normalize(out, x.Load(off, n, &s.B[0]), w.Load(off, n, &s.B[1]), b.Load(off, n, &s.B[2]), mean, rstd)
		y.Store(off, out)
	}
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
	ms, rs := rowStats(mv, xv.Rows), rowStats(rv, xv.Rows)
	cols := xv.Cols
	cpu.Parallel(xv.Rows, cpu.RowGrain(cols), func(lo, hi int, s *cpu.Scratch) {
		w, b := cpu.OptRowSpan(wv, 0), cpu.OptRowSpan(bv, 0)
		for r := lo; r < hi; r++ {
			x, y := cpu.RowSpan(xv, r), cpu.RowSpan(yv, r)
			mu, inv := meanRstd(x, cols, eps, s)
			normalizeRow(y, x, w, b, cols, mu, inv, s)
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

// meanRstd computes a row's mean and 1/sqrt(var + eps) in one pass over
// data shifted by its first element, which keeps the variance accurate when
// the mean is large against the spread.
func meanRstd(x cpu.Span, cols int, eps float32, s *cpu.Scratch) (float32, float32) {
	k := cpu.K()
	shift := x.Load(0, 1, &s.B[0])[0]
	var sum, sq float64
	for off := 0; off < cols; off += cpu.Chunk {
		n := min(cpu.Chunk, cols-off)
		d := s.B[1][:n]
		k.Normalize(d, x.Load(off, n, &s.B[0]), nil, nil, shift, 1)
		sum += float64(k.Sum(d))
		sq += float64(k.SumSq(d))
	}
	m := sum / float64(cols)
	variance := max(sq/float64(cols)-m*m, 0)
	return float32(m + float64(shift)), float32(1 / math.Sqrt(variance+float64(eps)))
}
