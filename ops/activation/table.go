package activation

import (
	"sync"
	"unsafe"

	"metalcore/backend/cpu"
	"metalcore/internal/core"
)

// A 16-bit input has 65,536 possible values, so on the CPU an activation of
// a float16 or bfloat16 tensor is a table lookup: the table holds what the
// float32 kernel computes for every value (rounded to the dtype for the
// forward pass, the float32 derivative for the backward one). Same results,
// no transcendental arithmetic per element. Tables are built on first use
// by the portable kernels, so a 16-bit result does not depend on which
// instruction set was active when its table was built.

type table struct {
	once sync.Once
	fwd  *[1 << 16]uint16  // y for each input bit pattern (arrays: a uint16
	grad *[1 << 16]float32 // index needs no bounds check)
}

var tables sync.Map // tableKey -> *table

// tableKey names a table: the kernel (its name says the function, its form
// and forward or backward) and the dtype.
type tableKey struct {
	kernel string
	dt     core.DType
}

func tableFor(kernel string, dt core.DType) *table {
	k := tableKey{kernel: kernel, dt: dt}
	if t, ok := tables.Load(k); ok {
		return t.(*table)
	}
	t, _ := tables.LoadOrStore(k, &table{})
	return t.(*table)
}

// allInputs is every bit pattern of dt, widened to float32.
func allInputs(dt core.DType) []float32 {
	bits := make([]uint16, 1<<16)
	for i := range bits {
		bits[i] = uint16(i)
	}
	x := make([]float32, len(bits))
	cpu.Span{P: unsafePtr(bits), DT: dt}.Load(0, x)
	return x
}

// forwardTable is a chunk function looking y up by x's bit pattern.
func forwardTable(t *table, dt core.DType, f func(dst, x []float32)) chunkFn {
	t.once.Do(func() {
		x := allInputs(dt)
		f(x, x)
		t.fwd = new([1 << 16]uint16)
		cpu.Span{P: unsafePtr(t.fwd[:]), DT: dt}.Store(0, x)
	})
	return func(o, a, _ cpu.Span, off, m int, _ *cpu.Scratch) { lookup(o.U16(off, m), a.U16(off, m), t.fwd) }
}

// gradTable is a chunk function computing dx = dy * f'(x) with f'(x) looked
// up by x's bit pattern (a: dy, b: x).
func gradTable(t *table, dt core.DType, f func(dst, dy, x []float32)) chunkFn {
	t.once.Do(func() {
		x := allInputs(dt)
		ones := make([]float32, len(x))
		for i := range ones {
			ones[i] = 1
		}
		t.grad = new([1 << 16]float32)
		f(t.grad[:], ones, x)
	})
	return func(o, a, b cpu.Span, off, m int, s *cpu.Scratch) {
		g := s.Buf(bufOut, m)
		lookup(g, b.U16(off, m), t.grad)
		cpu.K().Mul(g, g, a.Load(off, s.Buf(bufA, m)))
		o.Store(off, g)
	}
}

// lookup sets out[i] = t[in[i]], eight at a time: the independent loads
// overlap (measured: 2x faster than one at a time).
func lookup[T uint16 | float32](out []T, in []uint16, t *[1 << 16]T) {
	out = out[:len(in)]
	i := 0
	for ; i+8 <= len(in); i += 8 {
		s, o := in[i:i+8:i+8], out[i:i+8:i+8]
		o[0], o[1], o[2], o[3] = t[s[0]], t[s[1]], t[s[2]], t[s[3]]
		o[4], o[5], o[6], o[7] = t[s[4]], t[s[5]], t[s[6]], t[s[7]]
	}
	for ; i < len(in); i++ {
		out[i] = t[in[i]]
	}
}

func unsafePtr[T any](s []T) unsafe.Pointer { return unsafe.Pointer(&s[0]) }
