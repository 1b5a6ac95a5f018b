// Code generated from ../avx512/reductions.go by go generate; DO NOT EDIT.

//go:build goexperiment.simd && amd64

package avx2

import (
	"math"
)

func sumSq(x []float32) float32 {
	var a0, a1 vf
	i, n := 0, full(len(x))
	for ; i+2*W <= n; i += 2 * W {
		v0, v1 := load(x, i), load(x, i+W)
		a0 = v0.MulAdd(v0, a0)
		a1 = v1.MulAdd(v1, a1)
	}
	for ; i < n; i += W {
		v := load(x, i)
		a0 = v.MulAdd(v, a0)
	}
	if n < len(x) {
		v := loadPart(x[n:])
		a1 = v.MulAdd(v, a1)
	}
	return hsum(a0.Add(a1))
}

func dot(a, b []float32) float32 {
	var a0, a1 vf
	b = b[:len(a)]
	i, n := 0, full(len(a))
	for ; i+2*W <= n; i += 2 * W {
		a0 = load(a, i).MulAdd(load(b, i), a0)
		a1 = load(a, i+W).MulAdd(load(b, i+W), a1)
	}
	for ; i < n; i += W {
		a0 = load(a, i).MulAdd(load(b, i), a0)
	}
	if n < len(a) {
		a1 = loadPart(a[n:]).MulAdd(loadPart(b[n:]), a1)
	}
	return hsum(a0.Add(a1))
}

func sumDot(a, b []float32, shift float32) (float32, float32) {
	var s0, s1, d0, d1 vf
	sv := splat(shift)
	b = b[:len(a)]
	i, n := 0, full(len(a))
	for ; i+2*W <= n; i += 2 * W {
		a0, a1 := load(a, i), load(a, i+W)
		s0, s1 = s0.Add(a0), s1.Add(a1)
		d0, d1 = a0.MulAdd(load(b, i).Sub(sv), d0), a1.MulAdd(load(b, i+W).Sub(sv), d1)
	}
	for ; i < n; i += W {
		a0 := load(a, i)
		s0, d0 = s0.Add(a0), a0.MulAdd(load(b, i).Sub(sv), d0)
	}
	if n < len(a) { // a's missing lanes read 0, so their terms are 0
		a1 := loadPart(a[n:])
		s1, d1 = s1.Add(a1), a1.MulAdd(loadPart(b[n:]).Sub(sv), d1)
	}
	d := d0.Add(d1)
	return hsum(s0.Add(s1)), hsum(d)
}

func mulSumDot(g, a, w, b []float32, shift float32) (float32, float32) {
	var s0, s1, d0, d1 vf
	sv := splat(shift)
	a, w, b = a[:len(g)], w[:len(g)], b[:len(g)]
	i, n := 0, full(len(g))
	for ; i+2*W <= n; i += 2 * W {
		g0, g1 := load(a, i).Mul(load(w, i)), load(a, i+W).Mul(load(w, i+W))
		store(g0, g, i)
		store(g1, g, i+W)
		s0, s1 = s0.Add(g0), s1.Add(g1)
		d0, d1 = g0.MulAdd(load(b, i).Sub(sv), d0), g1.MulAdd(load(b, i+W).Sub(sv), d1)
	}
	for ; i < n; i += W {
		g0 := load(a, i).Mul(load(w, i))
		store(g0, g, i)
		s0, d0 = s0.Add(g0), g0.MulAdd(load(b, i).Sub(sv), d0)
	}
	if n < len(g) { // g's missing lanes are 0
		g1 := loadPart(a[n:]).Mul(loadPart(w[n:]))
		storePart(g1, g[n:])
		s1, d1 = s1.Add(g1), g1.MulAdd(loadPart(b[n:]).Sub(sv), d1)
	}
	d := d0.Add(d1)
	return hsum(s0.Add(s1)), hsum(d)
}

func shiftedSums(x []float32, shift float32) (float32, float32) {
	var s0, s1, q0, q1 vf
	sv := splat(shift)
	i, n := 0, full(len(x))
	for ; i+2*W <= n; i += 2 * W {
		d0, d1 := load(x, i).Sub(sv), load(x, i+W).Sub(sv)
		s0, s1 = s0.Add(d0), s1.Add(d1)
		q0, q1 = d0.MulAdd(d0, q0), d1.MulAdd(d1, q1)
	}
	for ; i < n; i += W {
		d0 := load(x, i).Sub(sv)
		s0, q0 = s0.Add(d0), d0.MulAdd(d0, q0)
	}
	if n < len(x) { // the missing lanes read 0: their d = -shift is masked out
		d1 := loadPart(x[n:]).Sub(sv).Merge(zero(), lanes(len(x)-n))
		s1, q1 = s1.Add(d1), d1.MulAdd(d1, q1)
	}
	q := q0.Add(q1)
	return hsum(s0.Add(s1)), hsum(q)
}

// maxOf propagates NaN like the portable Max: a lane that saw NaN stays NaN.
func maxOf(x []float32) float32 {
	m, nan := splat(float32(math.Inf(-1))), zero()
	n := full(len(x))
	for i := 0; i < n; i += W {
		v := load(x, i)
		m = m.Max(v)
		nan = v.Merge(nan, v.IsNaN())
	}
	if n < len(x) {
		v := loadPart(x[n:]).Merge(splat(float32(math.Inf(-1))), lanes(len(x)-n))
		m = m.Max(v)
		nan = v.Merge(nan, v.IsNaN())
	}
	var b [4]float32
	maxTo4(m).Store(&b)
	if s := hsum(nan); s != s {
		return s
	}
	return max(b[0], b[1], b[2], b[3])
}

// expSum clamps x - m only from below: m is at least every x (see the
// Table), so there is no overflow to clamp and no NaN to carry.
func expSum(dst, x []float32, m float32) float32 {
	var acc vf
	mv, lo := splat(m), kExpLo.v()
	dst = dst[:len(x)]
	n := full(len(x))
	for i := 0; i < n; i += W {
		e := expScale(expReduce(load(x, i).Sub(mv).Max(lo)))
		store(e, dst, i)
		acc = acc.Add(e)
	}
	if n < len(x) {
		e := expScale(expReduce(loadPart(x[n:]).Sub(mv).Max(lo)))
		storePart(e, dst[n:])
		acc = acc.Add(e.Merge(zero(), lanes(len(x)-n)))
	}
	return hsum(acc)
}
