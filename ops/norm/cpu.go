package norm

import (
	"math"
	"unsafe"

	"metalcore/backend/cpu"
	"metalcore/backend/cpu/simd"
	"metalcore/internal/core"
)

// The CPU kernels work a row at a time on float32 views of the row: the
// tensor's own memory for float32, a per-worker buffer filled by one
// conversion for 16-bit dtypes (bfloat16 rows are read as they are). Weight
// and bias are converted once per call.

func init() {
	rmsnormFwd.Register(core.DeviceCPU, rmsnormFwdCPU)
	fusedAddRMSNormFwd.Register(core.DeviceCPU, fusedAddRMSNormFwdCPU)
	layernormFwd.Register(core.DeviceCPU, layernormFwdCPU)
	rmsnormBwd.Register(core.DeviceCPU, rmsnormBwdCPU)
	layernormBwd.Register(core.DeviceCPU, layernormBwdCPU)
	normBwdPartials.Register(core.DeviceCPU, func(x *core.View, _ int, _ unsafe.Pointer) (int, error) {
		return min(x.Rows, maxPartials), nil
	})
}

// Scratch buffer slots of the row kernels.
const (
	bufX   = iota // x's row (or the sum x + residual)
	bufDY         // dy's row
	bufG          // g = dy * w
	bufSum        // a chunk of a gradient's column sum
)

// Call-level scratch slots (cpu.CallScratch): weight and bias as float32.
const (
	callWeight = iota
	callBias
)

func rmsnormFwdCPU(xv, wv, _, yv, _, rv *core.View, eps float32, _ unsafe.Pointer) error {
	vs, release := cpu.CallScratch()
	defer release()
	rs, w, cols := rowStats(rv, xv.Rows), cpu.Vector(wv, vs, callWeight), xv.Cols
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

func fusedAddRMSNormFwdCPU(xv, resv, wv, yv, rov, rv *core.View, eps float32, _ unsafe.Pointer) error {
	vs, release := cpu.CallScratch()
	defer release()
	rs, w, cols := rowStats(rv, xv.Rows), cpu.Vector(wv, vs, callWeight), xv.Cols
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

func layernormFwdCPU(xv, wv, bv, yv, mv, rv *core.View, eps float32, _ unsafe.Pointer) error {
	ms, rs := rowStats(mv, xv.Rows), rowStats(rv, xv.Rows)
	vs, release := cpu.CallScratch()
	defer release()
	w, b, cols := cpu.Vector(wv, vs, callWeight), cpu.Vector(bv, vs, callBias), xv.Cols
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

func rmsnormBwdCPU(b *bwdCall, _, rv *core.View, gs []*core.View, wsv *core.View, _ unsafe.Pointer) error {
	vs, release := cpu.CallScratch()
	defer release()
	cols, w, rs := b.x.Cols, cpu.Vector(b.w, vs, callWeight), rowStats(rv, b.x.Rows)
	row := func(r int, partial []float32, s *cpu.Scratch) {
		k, inv := cpu.K(), rs[r]
		if dy16, x16, dx16, ok := b.bf16Rows(r); ok { // no float32 copies
			_, dot := k.BF16Rows.GradDots(dy16, x16, w, 0)
			c := dot * inv * inv / float32(cols)
			if partial != nil {
				k.BF16Rows.GradAcc(partial, nil, dy16, x16, 0, inv)
			}
			k.BF16Rows.NormGrad(dx16, dy16, x16, w, 0, c, 0, inv)
			return
		}
		dys, xs := b.rows(r, s)
		g, _, dot := weighted(dys, xs, w, 0, s)
		c := dot * inv * inv / float32(cols)
		if partial != nil {
			k.FMAcc(partial, dys, xs, inv)
		}
		writeRow(cpu.RowSpan(b.dx, r), g, func(out []float32) { k.NormGrad(out, g, xs, 0, c, 0, inv) })
	}
	reduceRows(b.x.Rows, cols, 1, wsv, gs, row)
	return nil
}

func layernormBwdCPU(b *bwdCall, mv, rv *core.View, gs []*core.View, wsv *core.View, _ unsafe.Pointer) error {
	vs, release := cpu.CallScratch()
	defer release()
	cols, w := b.x.Cols, cpu.Vector(b.w, vs, callWeight)
	ms, rs := rowStats(mv, b.x.Rows), rowStats(rv, b.x.Rows)
	row := func(r int, partial []float32, s *cpu.Scratch) {
		// xhat = (x - mu) * inv is never stored: each pass forms x - mu
		k, mu, inv := cpu.K(), ms[r], rs[r]
		if dy16, x16, dx16, ok := b.bf16Rows(r); ok { // no float32 copies
			sumG, dotGX := k.BF16Rows.GradDots(dy16, x16, w, mu)
			a, c := sumG/float32(cols), dotGX*inv/float32(cols)
			if partial != nil {
				k.BF16Rows.GradAcc(partial[:cols], partial[cols:], dy16, x16, mu, inv)
			}
			k.BF16Rows.NormGrad(dx16, dy16, x16, w, mu, c*inv, a, inv)
			return
		}
		dys, xs := b.rows(r, s)
		g, sumG, dotGX := weighted(dys, xs, w, mu, s)
		a, c := sumG/float32(cols), dotGX*inv/float32(cols)
		if partial != nil { // dweight's and dbias's
			k.AccMulSum(partial[:cols], partial[cols:], dys, xs, mu, inv)
		}
		writeRow(cpu.RowSpan(b.dx, r), g, func(out []float32) { k.NormGrad(out, g, xs, mu, c*inv, a, inv) })
	}
	reduceRows(b.x.Rows, cols, 2, wsv, gs, row)
	return nil
}

// bf16Rows is row r of dy, x and dx as bfloat16, for the passes that read
// and write them as they are; ok is false for other dtypes.
func (b *bwdCall) bf16Rows(r int) (dy, x, dx []uint16, ok bool) {
	if b.x.DType != core.BF16 {
		return nil, nil, nil, false
	}
	cols := b.x.Cols
	return cpu.RowSpan(b.dy, r).U16(0, cols), cpu.RowSpan(b.x, r).U16(0, cols), cpu.RowSpan(b.dx, r).U16(0, cols), true
}

// rows loads row r of dy and x.
func (b *bwdCall) rows(r int, s *cpu.Scratch) (dy, x []float32) {
	cols := b.x.Cols
	return cpu.RowSpan(b.dy, r).Load(0, s.Buf(bufDY, cols)), cpu.RowSpan(b.x, r).Load(0, s.Buf(bufX, cols))
}

// weighted is g = dy * w (dy itself without a weight) with the sum of g
// and its dot product with v - shift, in one pass.
func weighted(dy, v, w []float32, shift float32, s *cpu.Scratch) (g []float32, sum, dot float32) {
	k := cpu.K()
	if w == nil {
		sum, dot = k.SumDot(dy, v, shift)
		return dy, sum, dot
	}
	g = s.Buf(bufG, len(dy))
	sum, dot = k.MulSumDot(g, dy, w, v, shift)
	return g, sum, dot
}

// reduceRows runs row(r, partial, scratch) over all rows. Without requested
// gradients partial is nil and rows are split freely; otherwise rows go in
// fixed blocks, each accumulating perRow partial rows of width cols in the
// workspace, which are then summed in block order into gs (nil entries
// skipped).
func reduceRows(rows, cols, perRow int, ws *core.View, gs []*core.View, row func(r int, partial []float32, s *cpu.Scratch)) {
	if ws == nil {
		cpu.Parallel(rows, cpu.RowGrain(cols), func(lo, hi int, s *cpu.Scratch) {
			for r := lo; r < hi; r++ {
				row(r, nil, s)
			}
		})
		return
	}
	blocks, stride := min(rows, maxPartials), perRow*cols
	partials := cpu.Float32s(ws.Base, blocks*stride)
	// a piece takes whole blocks of at least cpu.RowGrain's rows: a small
	// input stays on the calling thread (waking another costs more than its
	// rows), and the sums are the same, by block, however the blocks split
	cpu.Parallel(blocks, max(1, cpu.RowGrain(cols)*blocks/rows), func(lo, hi int, s *cpu.Scratch) {
		for blk := lo; blk < hi; blk++ {
			p := partials[blk*stride : (blk+1)*stride]
			clear(p)
			for r := blk * rows / blocks; r < (blk+1)*rows/blocks; r++ {
				row(r, p, s)
			}
		}
	})
	cpu.Parallel(cols, cpu.Chunk, func(lo, hi int, s *cpu.Scratch) {
		k := cpu.K()
		for i, g := range gs {
			if g == nil {
				continue
			}
			dst := cpu.RowSpan(g, 0)
			for off := lo; off < hi; off += cpu.Chunk {
				n := min(cpu.Chunk, hi-off)
				acc := s.Buf(bufSum, n)
				copy(acc, partials[i*cols+off:])
				for blk := 1; blk < blocks; blk++ {
					q := partials[blk*stride+i*cols+off:][:n]
					k.Add(acc, acc, q)
				}
				dst.Store(off, acc)
			}
		}
	})
}
