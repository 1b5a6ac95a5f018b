package rope

import (
	"unsafe"

	"metalcore/backend/cpu"
	"metalcore/internal/core"
)

func init() { rope.Register(core.DeviceCPU, ropeCPU) }

// Scratch slots: a row of x, cos, sin and y as float32.
const (
	bufX = iota
	bufCos
	bufSin
	bufY
)

func ropeCPU(xv, cv, sv, yv *core.View, l *layout, _ unsafe.Pointer) error {
	d, dt := 2*l.half, xv.DType
	size := int64(dt.Size())
	rows := l.b * l.h * l.t
	at := func(v *core.View, off int64) cpu.Span { return cpu.Span{P: unsafe.Add(v.Base, off*size), DT: dt} }
	cpu.Parallel(rows, cpu.RowGrain(d), func(lo, hi int, s *cpu.Scratch) {
		for r := lo; r < hi; r++ {
			t, bh := r%l.t, r/l.t
			h, b := bh%l.h, bh/l.h
			x := at(xv, int64(b)*l.xsb+int64(h)*l.xsh+int64(t)*l.xst).Load(0, s.Buf(bufX, d))
			c := at(cv, int64(b)*l.csb+int64(t)*l.cst).Load(0, s.Buf(bufCos, d))
			sn := at(sv, int64(b)*l.ssb+int64(t)*l.sst).Load(0, s.Buf(bufSin, d))
			out := at(yv, int64(b)*l.ysb+int64(h)*l.ysh+int64(t)*l.yst)
			y := out.Out(0, s.Buf(bufY, d))
			rotate(y, x, c, sn, l.half, l.backward)
			out.Store(0, y)
		}
	})
	return nil
}

func rotate(y, x, c, s []float32, half int, backward bool) {
	x1, x2, c1, c2, s1, s2 := x[:half], x[half:], c[:half], c[half:], s[:half], s[half:]
	y1, y2 := y[:half], y[half:]
	if backward {
		for j := range x1 {
			y1[j], y2[j] = x1[j]*c1[j]+x2[j]*s2[j], x2[j]*c2[j]-x1[j]*s1[j]
		}
		return
	}
	for j := range x1 {
		y1[j], y2[j] = x1[j]*c1[j]-x2[j]*s1[j], x2[j]*c2[j]+x1[j]*s2[j]
	}
}
