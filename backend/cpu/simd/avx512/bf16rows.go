//go:build goexperiment.simd && amd64

package avx512

import (
	"simd/archsimd"
)

// widenBF16 is bfloat16 bits (in the low half of each lane) as float32.
func widenBF16(h vi) vf { return asF(h.ShiftAllLeft(16)) }

// normalizeBF16 is normalize on bfloat16 rows, x widened and the result
// rounded within the pass.
func normalizeBF16(dst, x []uint16, w, b []float32, mean, rstd float32) {
	mv, rv := splat(mean), splat(rstd)
	x = x[:len(dst)]
	wv, bv, wv1, bv1 := kOne.v(), zero(), kOne.v(), zero()
	i, n := 0, full(len(dst))
	for ; i+2*W <= n; i += 2 * W {
		if w != nil {
			wv, wv1 = load(w, i), load(w, i+W)
		}
		if b != nil {
			bv, bv1 = load(b, i), load(b, i+W)
		}
		y0 := normVec(widenBF16(loadU16(x, i)), mv, rv, wv, bv)
		y1 := normVec(widenBF16(loadU16(x, i+W)), mv, rv, wv1, bv1)
		storeHighHalves(roundBF16High(asI(y0)), roundBF16High(asI(y1)), dst, i)
	}
	for ; i < n; i += W {
		if w != nil {
			wv = load(w, i)
		}
		if b != nil {
			bv = load(b, i)
		}
		storeU16(roundBF16(asI(normVec(widenBF16(loadU16(x, i)), mv, rv, wv, bv))), dst, i)
	}
	if n < len(dst) {
		wv, bv = partOr(w, n, wv), partOr(b, n, bv)
		storeU16Part(roundBF16(asI(normVec(widenBF16(loadU16Part(x[n:])), mv, rv, wv, bv))), dst[n:])
	}
	archsimd.ClearAVXUpperBits()
}

func sumSqBF16(x []uint16) float32 {
	var a0, a1 vf
	i, n := 0, full(len(x))
	for ; i+2*W <= n; i += 2 * W {
		v0, v1 := widenBF16(loadU16(x, i)), widenBF16(loadU16(x, i+W))
		a0, a1 = v0.MulAdd(v0, a0), v1.MulAdd(v1, a1)
	}
	for ; i < n; i += W {
		v := widenBF16(loadU16(x, i))
		a0 = v.MulAdd(v, a0)
	}
	if n < len(x) {
		v := widenBF16(loadU16Part(x[n:]))
		a1 = v.MulAdd(v, a1)
	}
	return hsum(a0.Add(a1))
}

func addSumSqBF16(dst, a, b []uint16) float32 {
	var q0, q1 vf
	a, b = a[:len(dst)], b[:len(dst)]
	i, n := 0, full(len(dst))
	for ; i+2*W <= n; i += 2 * W {
		r0 := roundBF16High(asI(widenBF16(loadU16(a, i)).Add(widenBF16(loadU16(b, i)))))
		r1 := roundBF16High(asI(widenBF16(loadU16(a, i+W)).Add(widenBF16(loadU16(b, i+W)))))
		storeHighHalves(r0, r1, dst, i)
		v0, v1 := asF(r0.And(asI(kHighHalf.v()))), asF(r1.And(asI(kHighHalf.v())))
		q0, q1 = v0.MulAdd(v0, q0), v1.MulAdd(v1, q1)
	}
	for ; i < n; i += W {
		r := roundBF16High(asI(widenBF16(loadU16(a, i)).Add(widenBF16(loadU16(b, i)))))
		storeU16(r.ShiftAllRight(16), dst, i)
		v := asF(r.And(asI(kHighHalf.v())))
		q0 = v.MulAdd(v, q0)
	}
	if n < len(dst) { // the missing lanes add 0 + 0
		r := roundBF16High(asI(widenBF16(loadU16Part(a[n:])).Add(widenBF16(loadU16Part(b[n:])))))
		storeU16Part(r.ShiftAllRight(16), dst[n:])
		v := asF(r.And(asI(kHighHalf.v())))
		q1 = v.MulAdd(v, q1)
	}
	return hsum(q0.Add(q1))
}

// weightedBF16 is g = dy * w for the vector of dy's row at i (dy itself
// without a weight).
func weightedBF16(dy []uint16, w []float32, i int) vf {
	g := widenBF16(loadU16(dy, i))
	if w != nil {
		g = g.Mul(load(w, i))
	}
	return g
}

func weightedBF16Part(dy []uint16, w []float32, n int) vf {
	g := widenBF16(loadU16Part(dy[n:]))
	if w != nil {
		g = g.Mul(loadPart(w[n:]))
	}
	return g
}

func gradDotsBF16(dy, x []uint16, w []float32, shift float32) (float32, float32) {
	var s0, d0 vf
	sv := splat(shift)
	x = x[:len(dy)]
	n := full(len(dy))
	for i := 0; i < n; i += W {
		g := weightedBF16(dy, w, i)
		s0, d0 = s0.Add(g), g.MulAdd(widenBF16(loadU16(x, i)).Sub(sv), d0)
	}
	if n < len(dy) { // g's missing lanes are 0
		g := weightedBF16Part(dy, w, n)
		s0, d0 = s0.Add(g), g.MulAdd(widenBF16(loadU16Part(x[n:])).Sub(sv), d0)
	}
	return hsum(s0), hsum(d0)
}

func gradAccBF16(pw, pb []float32, dy, x []uint16, shift, scale float32) {
	shv, scv := splat(shift), splat(scale)
	dy, x = dy[:len(pw)], x[:len(pw)]
	n := full(len(pw))
	for i := 0; i < n; i += W {
		d := widenBF16(loadU16(dy, i))
		store(d.Mul(scv).MulAdd(widenBF16(loadU16(x, i)).Sub(shv), load(pw, i)), pw, i)
		if pb != nil {
			store(load(pb, i).Add(d), pb, i)
		}
	}
	if n < len(pw) {
		d := widenBF16(loadU16Part(dy[n:]))
		storePart(d.Mul(scv).MulAdd(widenBF16(loadU16Part(x[n:])).Sub(shv), loadPart(pw[n:])), pw[n:])
		if pb != nil {
			storePart(loadPart(pb[n:]).Add(d), pb[n:])
		}
	}
	archsimd.ClearAVXUpperBits()
}

func normGradBF16(dst, dy, x []uint16, w []float32, shift, c, d, s float32) {
	shv, cv, dv, sv := splat(shift), splat(-c), splat(d), splat(s)
	grad := func(g, xv vf) vi { return roundBF16High(asI(xv.Sub(shv).MulAdd(cv, g).Sub(dv).Mul(sv))) }
	dy, x = dy[:len(dst)], x[:len(dst)]
	i, n := 0, full(len(dst))
	for ; i+2*W <= n; i += 2 * W {
		r0 := grad(weightedBF16(dy, w, i), widenBF16(loadU16(x, i)))
		r1 := grad(weightedBF16(dy, w, i+W), widenBF16(loadU16(x, i+W)))
		storeHighHalves(r0, r1, dst, i)
	}
	for ; i < n; i += W {
		storeU16(grad(weightedBF16(dy, w, i), widenBF16(loadU16(x, i))).ShiftAllRight(16), dst, i)
	}
	if n < len(dst) {
		storeU16Part(grad(weightedBF16Part(dy, w, n), widenBF16(loadU16Part(x[n:]))).ShiftAllRight(16), dst[n:])
	}
	archsimd.ClearAVXUpperBits()
}

func shiftedSumsBF16(x []uint16, shift float32) (float32, float32) {
	var s0, s1, q0, q1 vf
	sv := splat(shift)
	i, n := 0, full(len(x))
	for ; i+2*W <= n; i += 2 * W {
		d0, d1 := widenBF16(loadU16(x, i)).Sub(sv), widenBF16(loadU16(x, i+W)).Sub(sv)
		s0, s1 = s0.Add(d0), s1.Add(d1)
		q0, q1 = d0.MulAdd(d0, q0), d1.MulAdd(d1, q1)
	}
	for ; i < n; i += W {
		d0 := widenBF16(loadU16(x, i)).Sub(sv)
		s0, q0 = s0.Add(d0), d0.MulAdd(d0, q0)
	}
	if n < len(x) { // the missing lanes read 0: their d = -shift is masked out
		d1 := widenBF16(loadU16Part(x[n:])).Sub(sv).Merge(zero(), lanes(len(x)-n))
		s1, q1 = s1.Add(d1), d1.MulAdd(d1, q1)
	}
	q := q0.Add(q1)
	return hsum(s0.Add(s1)), hsum(q)
}
