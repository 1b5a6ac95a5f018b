package cpu

import (
	"math"
	"unsafe"

	"metalcore/internal/core"
)

// Span is tensor memory of one dtype that kernels read and write as float32
// chunks: float32 memory directly, 16-bit memory converted through a
// scratch buffer. A nil P is an absent optional tensor.
type Span struct {
	P  unsafe.Pointer
	DT core.DType
}

// RowSpan is row r of v.
func RowSpan(v *core.View, r int) Span { return Span{v.RowPtr(r), v.DType} }

// TensorSpan is the whole of a contiguous v, from its first element.
func TensorSpan(v *core.View) Span { return Span{v.Base, v.DType} }

// OptRowSpan is row r of v, or an absent Span for a nil view.
func OptRowSpan(v *core.View, r int) Span {
	if v == nil {
		return Span{}
	}
	return RowSpan(v, r)
}

// At is the span starting off elements further.
func (s Span) At(off int) Span { return Span{unsafe.Add(s.P, off*s.DT.Size()), s.DT} }

func (s Span) f32(off, n int) []float32 {
	return unsafe.Slice((*float32)(unsafe.Add(s.P, off*4)), n)
}

// U16 views elements [off, off+n) of 16-bit memory as their bit patterns.
func (s Span) U16(off, n int) []uint16 { return s.u16(off, n) }

func (s Span) u16(off, n int) []uint16 {
	return unsafe.Slice((*uint16)(unsafe.Add(s.P, off*2)), n)
}

// Load returns elements [off, off+len(buf)) as float32 (nil for an absent
// span): the float32 memory itself, or buf filled by conversion.
func (s Span) Load(off int, buf []float32) []float32 {
	n := len(buf)
	switch {
	case s.P == nil:
		return nil
	case s.DT == core.F32:
		return s.f32(off, n)
	case s.DT == core.BF16:
		K().BF16ToF32(buf, s.u16(off, n))
	default:
		K().F16ToF32(buf, s.u16(off, n))
	}
	return buf
}

// Out is where a kernel should write elements [off, off+len(buf)) before
// Store: the float32 memory itself, or buf.
func (s Span) Out(off int, buf []float32) []float32 {
	if s.DT == core.F32 {
		return s.f32(off, len(buf))
	}
	return buf
}

// Store writes v to elements [off, off+len(v)), rounding to the dtype; a
// no-op when v came from Out on float32 memory.
func (s Span) Store(off int, v []float32) {
	n := len(v)
	switch {
	case n == 0:
	case s.DT == core.F32:
		if d := s.f32(off, n); &d[0] != &v[0] {
			copy(d, v)
		}
	case s.DT == core.BF16:
		K().F32ToBF16(s.u16(off, n), v)
	default:
		K().F32ToF16(s.u16(off, n), v)
	}
}

// Float32s views a float32 tensor's memory (per-row statistics, workspace).
func Float32s(p unsafe.Pointer, n int) []float32 {
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*float32)(p), n)
}

// Vector is a whole per-column tensor (weight, bias) as float32: its own
// memory for float32, else converted once per call into buffer i of s (a
// call-level Scratch from CallScratch, so that no call allocates); nil for
// an absent one.
func Vector(v *core.View, s *Scratch, i int) []float32 {
	if v == nil {
		return nil
	}
	return RowSpan(v, 0).Load(0, s.Buf(i, v.Cols))
}

// Finite reports whether v is neither infinite nor NaN (a row whose maximum
// is not is NaN throughout, as in float64: inf - inf and NaN - NaN are NaN).
func Finite(v float32) bool { return !math.IsInf(float64(v), 0) && v == v }

// Fill sets every element of v to f.
func Fill(v []float32, f float32) {
	for i := range v {
		v[i] = f
	}
}
