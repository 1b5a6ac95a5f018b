package activation

import (
	"unsafe"

	"metalcore/backend/cpu"
	"metalcore/backend/cpu/simd"
	"metalcore/internal/core"
)

func init() {
	fwd.Register(core.DeviceCPU, forwardCPU)
	bwd.Register(core.DeviceCPU, backwardCPU)
}

// Scratch buffer slots of a chunk: its first and second inputs and its
// output, as float32.
const (
	bufA = iota
	bufB
	bufOut
)

func forwardCPU(xv, yv *core.View, kernel string, pick func(*simd.Table) func(dst, x []float32), _ unsafe.Pointer) error {
	if small(xv, yv) {
		pick(cpu.K())(cpu.Float32s(yv.Base, yv.N), cpu.Float32s(xv.Base, xv.N))
		return nil
	}
	if xv.DType != core.F32 { // every 16-bit input has its answer in a table
		elementwise(yv, xv, nil, forwardTable(tableFor(kernel, xv.DType), xv.DType, pick(&simd.Portable)))
		return nil
	}
	f := pick(cpu.K())
	elementwise(yv, xv, nil, floatChunks(func(dst, a, _ []float32) { f(dst, a) }))
	return nil
}

func backwardCPU(dyv, xv, dxv *core.View, kernel string, pick func(*simd.Table) func(dst, dy, x []float32), _ unsafe.Pointer) error {
	if small(xv, dyv, dxv) {
		pick(cpu.K())(cpu.Float32s(dxv.Base, dxv.N), cpu.Float32s(dyv.Base, dyv.N), cpu.Float32s(xv.Base, xv.N))
		return nil
	}
	if xv.DType != core.F32 {
		elementwise(dxv, dyv, xv, gradTable(tableFor(kernel, xv.DType), xv.DType, pick(&simd.Portable)))
		return nil
	}
	elementwise(dxv, dyv, xv, floatChunks(pick(cpu.K())))
	return nil
}

// small reports whether the views are contiguous float32 tensors that one
// piece of cpu.Parallel would cover: the primitive then runs on them whole,
// with no scratch, closures or goroutines.
func small(vs ...*core.View) bool {
	for _, v := range vs {
		if v.DType != core.F32 || !v.Contiguous || v.N > cpu.GrainElements {
			return false
		}
	}
	return true
}

// chunkFn computes elements [off, off+m) of o from a and b (b may be absent).
type chunkFn func(o, a, b cpu.Span, off, m int, s *cpu.Scratch)

// floatChunks runs f on float32 views of each chunk.
func floatChunks(f func(dst, a, b []float32)) chunkFn {
	return func(o, a, b cpu.Span, off, m int, s *cpu.Scratch) {
		dst := o.Out(off, s.Buf(bufOut, m))
		f(dst, a.Load(off, s.Buf(bufA, m)), b.Load(off, s.Buf(bufB, m)))
		o.Store(off, dst)
	}
}

// elementwise runs f chunk by chunk over every element. Contiguous tensors
// are cut into Chunk-long segments regardless of their shape, so a tensor
// with short rows still vectorizes; otherwise the segments are rows.
func elementwise(outView, aView, bView *core.View, f chunkFn) {
	if outView.N == 0 {
		return
	}
	// The workers get copies, so that the caller's views (in its core.Call)
	// stay on its stack: a CUDA call then allocates nothing.
	out, a, b := *outView, *aView, bView
	if b != nil {
		bc := *bView
		b = &bc
	}
	segs, segLen := out.Rows, out.Cols
	seg := func(v *core.View, i int) cpu.Span { return cpu.OptRowSpan(v, i) }
	flat := out.Contiguous && a.Contiguous && (b == nil || b.Contiguous)
	if flat {
		segs, segLen = (out.N+cpu.Chunk-1)/cpu.Chunk, cpu.Chunk
		seg = func(v *core.View, i int) cpu.Span {
			if v == nil {
				return cpu.Span{}
			}
			return cpu.TensorSpan(v).At(i * cpu.Chunk)
		}
	}
	cpu.Parallel(segs, cpu.RowGrain(segLen), func(lo, hi int, s *cpu.Scratch) {
		for i := lo; i < hi; i++ {
			n := segLen
			if flat {
				n = min(segLen, out.N-i*segLen)
			}
			o, sa, sb := seg(&out, i), seg(&a, i), seg(b, i)
			for off := 0; off < n; off += cpu.Chunk {
				f(o, sa, sb, off, min(cpu.Chunk, n-off), s)
			}
		}
	})
}
