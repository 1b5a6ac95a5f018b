// Package activation is the elementwise family: GELU (erf and tanh forms)
// and SiLU, forward and backward, on tensors of any shape.
package activation

import (
	"unsafe"

	"metalcore/encoder/cpu"
	"metalcore/encoder/cpu/simd"
	"metalcore/internal/core"
)

// GELU approximations, as in the header.
const (
	GeluErf  = 0
	GeluTanh = 1
)

func checkApproximate(a int32) error {
	if a != GeluErf && a != GeluTanh {
		return core.Errorf(core.ErrInvalidArgument, "approximate is %d; it must be 0 (erf) or 1 (tanh)", a)
	}
	return nil
}

// GeluFwd: y = gelu(x).
func GeluFwd(x *core.Tensor, approximate int32, y *core.Tensor, enc unsafe.Pointer) error {
	if err := checkApproximate(approximate); err != nil {
		return err
	}
	return forward(x, y, enc, geluKernel("fwd", approximate), func(k *simd.Table) func(dst, x []float32) {
		if approximate == GeluTanh {
			return k.GeluTanh
		}
		return k.GeluErf
	})
}

// GeluBwd: dx = dy * gelu'(x).
func GeluBwd(dy, x *core.Tensor, approximate int32, dx *core.Tensor, enc unsafe.Pointer) error {
	if err := checkApproximate(approximate); err != nil {
		return err
	}
	return backward(dy, x, dx, enc, geluKernel("bwd", approximate), func(k *simd.Table) func(dst, dy, x []float32) {
		if approximate == GeluTanh {
			return k.GeluTanhGrad
		}
		return k.GeluErfGrad
	})
}

// SiluFwd: y = x * sigmoid(x).
func SiluFwd(x, y *core.Tensor, enc unsafe.Pointer) error {
	return forward(x, y, enc, "silu_fwd", func(k *simd.Table) func(dst, x []float32) { return k.Silu })
}

// SiluBwd: dx = dy * silu'(x).
func SiluBwd(dy, x, dx *core.Tensor, enc unsafe.Pointer) error {
	return backward(dy, x, dx, enc, "silu_bwd", func(k *simd.Table) func(dst, dy, x []float32) { return k.SiluGrad })
}

// geluKernel is the CUDA kernel of GELU's pass ("fwd", "bwd") in the
// approximation's form: one kernel per form, so that neither form's
// registers limit the other's occupancy.
func geluKernel(pass string, approximate int32) string {
	if approximate == GeluTanh {
		return "gelu_tanh_" + pass
	}
	return "gelu_" + pass
}

// forward runs kernel (on CUDA) or, on the CPU, the primitive pick chooses.
func forward(x, y *core.Tensor, enc unsafe.Pointer, kernel string, pick func(*simd.Table) func(dst, x []float32)) error {
	var c core.Call
	xv := c.In("x", x)
	yv := c.Out("y", y)
	c.Check(func() error { return core.LikeX(xv, yv) })
	c.AllowInPlace(yv, xv)
	if err := c.Done(enc); err != nil || xv.N == 0 {
		return err
	}
	if xv.DeviceType == core.DeviceCUDA {
		return elementwiseCUDA(kernel, enc, []*core.View{xv, yv})
	}
	if xv.DType != core.F32 { // every 16-bit input has its answer in a table
		elementwise(yv, xv, nil, forwardTable(tableFor(kernel, xv.DType), xv.DType, pick(&simd.Portable)))
		return nil
	}
	f := pick(cpu.K())
	elementwise(yv, xv, nil, floatChunks(func(dst, a, _ []float32) { f(dst, a) }))
	return nil
}

func backward(dy, x, dx *core.Tensor, enc unsafe.Pointer, kernel string, pick func(*simd.Table) func(dst, dy, x []float32)) error {
	var c core.Call
	dyv := c.In("dy", dy)
	xv := c.In("x", x)
	dxv := c.Out("dx", dx)
	c.Check(func() error { return core.LikeX(xv, dyv, dxv) })
	c.AllowInPlace(dxv, dyv)
	if err := c.Done(enc); err != nil || xv.N == 0 {
		return err
	}
	if xv.DeviceType == core.DeviceCUDA {
		return elementwiseCUDA(kernel, enc, []*core.View{dyv, xv, dxv})
	}
	if xv.DType != core.F32 {
		elementwise(dxv, dyv, xv, gradTable(tableFor(kernel, xv.DType), xv.DType, pick(&simd.Portable)))
		return nil
	}
	elementwise(dxv, dyv, xv, floatChunks(pick(cpu.K())))
	return nil
}

// chunkFn computes elements [off, off+m) of o from a and b (b may be absent).
type chunkFn func(o, a, b cpu.Span, off, m int, s *cpu.Scratch)

// floatChunks runs f on float32 views of each chunk.
func floatChunks(f func(dst, a, b []float32)) chunkFn {
	return func(o, a, b cpu.Span, off, m int, s *cpu.Scratch) {
		dst := o.Out(off, s.Buf(2, m))
		f(dst, a.Load(off, s.Buf(0, m)), b.Load(off, s.Buf(1, m)))
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
