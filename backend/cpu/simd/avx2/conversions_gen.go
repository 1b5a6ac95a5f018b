// Code generated from ../avx512/conversions.go by go generate; DO NOT EDIT.

//go:build goexperiment.simd && amd64

package avx2

import (
	"simd/archsimd"
)

func bf16ToF32(dst []float32, src []uint16) {
	dst = dst[:len(src)]
	n := full(len(src))
	for i := 0; i < n; i += W {
		store(widenBF16(loadU16(src, i)), dst, i)
	}
	if n < len(src) {
		storePart(widenBF16(loadU16Part(src[n:])), dst[n:])
	}
	archsimd.ClearAVXUpperBits()
}

// roundBF16High rounds float32 bits u to bfloat16, nearest even, and
// leaves the result in the upper 16 bits (a NaN quieted, not rounded: a
// carry out of its mantissa would make it infinite).
func roundBF16High(u vi) vi {
	odd := u.ShiftAllRight(16).And(asI(kLowBit.v()))
	r := u.Add(asI(kHalfULP.v())).Add(odd)
	return u.Or(asI(kQuietBit.v())).Merge(r, u.And(asI(kAbsBits.v())).Greater(asI(kInfBits.v())))
}

func roundBF16(u vi) vi { return roundBF16High(u).ShiftAllRight(16) }

func f32ToBF16(dst []uint16, src []float32) {
	dst = dst[:len(src)]
	n := full(len(src))
	i := 0
	for ; i+2*W <= n; i += 2 * W {
		storeHighHalves(roundBF16High(asI(load(src, i))), roundBF16High(asI(load(src, i+W))), dst, i)
	}
	for ; i < n; i += W {
		storeU16(roundBF16(asI(load(src, i))), dst, i)
	}
	if n < len(src) {
		storeU16Part(roundBF16(asI(loadPart(src[n:]))), dst[n:])
	}
	archsimd.ClearAVXUpperBits()
}

func widenF16(h vi) vf {
	em := h.And(splatI(0x7fff)).ShiftAllLeft(13)
	f := asF(em).Mul(splat(0x1p112))
	f = asF(em.Or(splatI(0x7f800000))).Merge(f, em.Greater(splatI(0x7c00<<13-1)))
	return asF(asI(f).Or(h.And(splatI(0x8000)).ShiftAllLeft(16)))
}

func f16ToF32(dst []float32, src []uint16) {
	dst = dst[:len(src)]
	n := full(len(src))
	for i := 0; i < n; i += W {
		store(widenF16(loadU16(src, i)), dst, i)
	}
	if n < len(src) {
		storePart(widenF16(loadU16Part(src[n:])), dst[n:])
	}
	archsimd.ClearAVXUpperBits()
}

func roundF16(u vi) vi {
	a := u.And(splatI(0x7fffffff))
	sign := u.ShiftAllRight(16).And(splatI(0x8000))
	normal := a.Add(splatI(0xfff - 0x38000000)).Add(a.ShiftAllRight(13).And(splatI(1))).ShiftAllRight(13)
	sub := asI(asF(a).Add(splat(0.5))).Sub(splatI(0x3f000000))
	o := sub.Merge(normal, a.Less(splatI(0x38800000)))
	o = splatI(0x7c00).Merge(o, a.Greater(splatI(0x47800000-1)))
	nan := a.ShiftAllRight(13).And(splatI(0x3ff)).Or(splatI(0x7e00))
	o = nan.Merge(o, a.Greater(splatI(0x7f800000)))
	return o.Or(sign)
}

func f32ToF16(dst []uint16, src []float32) {
	dst = dst[:len(src)]
	n := full(len(src))
	for i := 0; i < n; i += W {
		storeU16(roundF16(asI(load(src, i))), dst, i)
	}
	if n < len(src) {
		storeU16Part(roundF16(asI(loadPart(src[n:]))), dst[n:])
	}
	archsimd.ClearAVXUpperBits()
}
