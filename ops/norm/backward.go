package norm

import (
	"unsafe"

	"metalcore/encoder/cpu"
	"metalcore/encoder/cuda"
	"metalcore/internal/core"
)

// maxPartials bounds the row blocks whose weight-gradient partials land in
// the workspace. The block split depends on the row count alone, so the
// reduction order, and with it dweight, is the same whatever the thread
// count.
const maxPartials = 32

// partialBlocks is the number of row blocks (and partial rows) for x, for
// `perRow` partial rows a block (1: RMSNorm, 2: LayerNorm). On the GPU: no
// more than the multiprocessors hold at once (a second wave would leave them
// half idle at its end, and doubles the partials), at most eight per
// multiprocessor, fewer for wide rows so that the partials stay small
// against the tensor (measured on an H100 for 4096x8192, whose 512-thread
// blocks fit one a multiprocessor: one wave instead of two 1.04-1.13x
// faster). The split depends on the shape and the device alone, so
// dweight's summation order does too.
// stream is the one the kernel will run on (nil for a size query).
func partialBlocks(x *core.View, perRow int, stream unsafe.Pointer) (int, error) {
	if x.DeviceType != core.DeviceCUDA {
		return min(x.Rows, maxPartials), nil
	}
	dev := int(x.DeviceID)
	sms, err := cuda.SMs(dev)
	if err != nil {
		return 0, cuda.Backend(err)
	}
	wide := 16 * sms * 1024 / max(x.Cols, 1)
	name, threads := bwdKernel(x, perRow)
	wave, err := cuda.Wave(dev, stream, name, threads)
	return min(x.Rows, wave, 8*sms, max(sms, wide)), cuda.Backend(err)
}

// workspaceBytes is the workspace for `perRow` float32 partial rows of
// width cols in each block.
func workspaceBytes(x *core.Tensor, perRow int) (int64, error) {
	var c core.Call
	xv := rowInput(&c, "x", x)
	if err := c.Done(nil); err != nil {
		return 0, err
	}
	blocks, err := partialBlocks(xv, perRow, nil)
	return partialBytes(xv, perRow, blocks), err
}

// partialBytes is the size of `blocks` per-block partials, perRow rows of
// x's width per block, in float32.
func partialBytes(x *core.View, perRow, blocks int) int64 {
	return int64(blocks) * int64(perRow) * int64(x.Cols) * 4
}

// RMSNormBwdWorkspace is the workspace RMSNormBwd needs for dweight.
func RMSNormBwdWorkspace(x *core.Tensor) (int64, error) { return workspaceBytes(x, 1) }

// LayerNormBwdWorkspace is the workspace LayerNormBwd needs for dweight and dbias.
func LayerNormBwdWorkspace(x *core.Tensor) (int64, error) { return workspaceBytes(x, 2) }

// bwdCall validates what both backward passes share: dy and x alike, dx
// like x (may be dy), weight and its gradient per column, per-row stats.
type bwdCall struct {
	core.Call
	dy, x, w, dx *core.View
	partials     int // row blocks, when gradients of w are requested
}

func newBwdCall(dy, x, weight, dx *core.Tensor) *bwdCall {
	b := &bwdCall{}
	b.dy = rowInput(&b.Call, "dy", dy)
	b.x = b.In("x", x)
	b.w = b.OptIn("weight", weight)
	b.dx = b.Out("dx", dx)
	b.Check(func() error { return core.LikeX(b.x, b.dy, b.dx) })
	b.Check(func() error { return core.PerColumn(b.x, b.w) })
	b.AllowInPlace(b.dx, b.dy)
	return b
}

func (b *bwdCall) stats(name string, t *core.Tensor) *core.View {
	v := b.In(name, t)
	b.Check(func() error { return core.RowStats(v, b.x) })
	return v
}

// grads registers the optional per-column gradients and the workspace they
// need (for the partials of a kernel on enc's stream); dweight requires
// weight.
func (b *bwdCall) grads(ws *core.Tensor, enc unsafe.Pointer, perRow int, names []string, ts ...*core.Tensor) ([]*core.View, *core.View) {
	gs := make([]*core.View, len(ts))
	want := false
	for i, t := range ts {
		gs[i] = b.OptOut(names[i], t)
		want = want || gs[i] != nil
	}
	if gs[0] != nil && b.w == nil {
		b.Fail(core.Errorf(core.ErrInvalidArgument, "%s is given but weight is NULL", names[0]))
	}
	b.Check(func() error { return core.PerColumn(b.x, gs...) })
	var need int64
	if want && b.x != nil {
		var err error
		b.partials, err = partialBlocks(b.x, perRow, enc)
		need = partialBytes(b.x, perRow, b.partials)
		b.Fail(err)
	}
	// a workspace given without gradients to sum is checked, then unused
	// (it may be smaller than the partials)
	wsv := b.Workspace("workspace", ws, need)
	if !want {
		wsv = nil
	}
	return gs, wsv
}

// RMSNormBwd: dx = rstd * (g - x * rstd^2 * mean(g * x)) with g = dy * w;
// dweight = sum over rows of dy * x * rstd.
func RMSNormBwd(dy, x, weight, rstd, dx, dweight, workspace *core.Tensor, enc unsafe.Pointer) error {
	b := newBwdCall(dy, x, weight, dx)
	rv := b.stats("rstd", rstd)
	gs, wsv := b.grads(workspace, enc, 1, []string{"dweight"}, dweight)
	if err := b.Done(enc); err != nil || b.x.N == 0 {
		return err
	}
	if b.x.DeviceType == core.DeviceCUDA {
		return normBwdCUDA(b, nil, rv, gs, wsv, enc)
	}
	vs, release := cpu.CallScratch()
	defer release()
	cols, w, rs := b.x.Cols, cpu.Vector(b.w, vs, 0), rowStats(rv, b.x.Rows)
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

// LayerNormBwd: with xhat = (x - mean) * rstd and g = dy * w,
// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)); dweight = sum dy*xhat,
// dbias = sum dy.
func LayerNormBwd(dy, x, weight, mean, rstd, dx, dweight, dbias, workspace *core.Tensor, enc unsafe.Pointer) error {
	b := newBwdCall(dy, x, weight, dx)
	mv := b.stats("mean", mean)
	rv := b.stats("rstd", rstd)
	gs, wsv := b.grads(workspace, enc, 2, []string{"dweight", "dbias"}, dweight, dbias)
	if err := b.Done(enc); err != nil || b.x.N == 0 {
		return err
	}
	if b.x.DeviceType == core.DeviceCUDA {
		return normBwdCUDA(b, mv, rv, gs, wsv, enc)
	}
	vs, release := cpu.CallScratch()
	defer release()
	cols, w := b.x.Cols, cpu.Vector(b.w, vs, 0)
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
	cpu.Parallel(blocks, 1, func(lo, hi int, s *cpu.Scratch) {
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
				acc := s.Buf(0, n)
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
