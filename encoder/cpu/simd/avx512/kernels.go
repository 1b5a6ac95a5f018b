//go:build goexperiment.simd && amd64

package avx512

import (
	"math"
	"simd/archsimd"

	"metalcore/encoder/cpu/simd"
)

// This file is the width-independent template of the vector primitives: it
// names vectors only through vf/vi and the helpers of width.go. Loops run W
// lanes at a time (reductions 2W with two accumulators) and leave the tail
// to the portable code, which computes the same approximations.

// Table is this ISA's implementation of every primitive.
var Table = simd.Table{
	Name:         isaName,
	Sum:          sum,
	SumSq:        sumSq,
	Max:          maxOf,
	Dot:          dot,
	ExpSum:       expSum,
	ExpScale:     expScale,
	Add:          add,
	Mul:          mul,
	Normalize:    normalize,
	NormGrad:     normGrad,
	SoftmaxGrad:  softmaxGrad,
	FMAcc:        fmAcc,
	GeluErf:      unary(geluErfV),
	GeluTanh:     unary(geluTanhV),
	Silu:         unary(siluV),
	GeluErfGrad:  binary(geluErfGradV),
	GeluTanhGrad: binary(geluTanhGradV),
	SiluGrad:     binary(siluGradV),
	BF16ToF32:    bf16ToF32,
	F16ToF32:     f16ToF32,
	F32ToBF16:    f32ToBF16,
	F32ToF16:     f32ToF16,
}

// The loops are pure vector code and every primitive ends with
// ClearAVXUpperBits before any scalar float code runs: a legacy-SSE
// instruction (Go's scalar float code) executed while the upper vector
// halves are dirty costs hundreds of cycles. Tails use partial loads and
// stores instead of scalar loops for the same reason.

// laneTable backs lanes(n): W all-ones lanes, then W zero lanes.
var laneTable = func() (t [2 * W]int32) {
	for i := range W {
		t[i] = -1
	}
	return
}()

// zero is the zero vector. splat(0) would materialize 0.0 with a legacy-SSE
// XORPS, which is exactly the instruction the vector sections must avoid.
func zero() (z vf) { return }

// hsum adds the lanes of v; it ends the vector section.
func hsum(v vf) float32 {
	var b [W]float32
	v.Store(&b)
	archsimd.ClearAVXUpperBits()
	var s float32
	for _, x := range b {
		s += x
	}
	return s
}

func sum(x []float32) float32 {
	var a0, a1 vf
	i := 0
	for ; i+2*W <= len(x); i += 2 * W {
		a0 = a0.Add(loadF(x[i:]))
		a1 = a1.Add(loadF(x[i+W:]))
	}
	for ; i < len(x); i += W {
		a0 = a0.Add(loadF(x[i:]))
	}
	return hsum(a0.Add(a1))
}

func sumSq(x []float32) float32 {
	var a0, a1 vf
	i := 0
	for ; i+2*W <= len(x); i += 2 * W {
		v0, v1 := loadF(x[i:]), loadF(x[i+W:])
		a0 = v0.MulAdd(v0, a0)
		a1 = v1.MulAdd(v1, a1)
	}
	for ; i < len(x); i += W {
		v := loadF(x[i:])
		a0 = v.MulAdd(v, a0)
	}
	return hsum(a0.Add(a1))
}

func dot(a, b []float32) float32 {
	var a0, a1 vf
	i := 0
	b = b[:len(a)]
	for ; i+2*W <= len(a); i += 2 * W {
		a0 = loadF(a[i:]).MulAdd(loadF(b[i:]), a0)
		a1 = loadF(a[i+W:]).MulAdd(loadF(b[i+W:]), a1)
	}
	for ; i < len(a); i += W {
		a0 = loadF(a[i:]).MulAdd(loadF(b[i:]), a0)
	}
	return hsum(a0.Add(a1))
}

// maxOf propagates NaN like the portable Max: a lane that saw NaN stays NaN.
func maxOf(x []float32) float32 {
	m, nan := splat(float32(math.Inf(-1))), zero()
	for i := 0; i < len(x); i += W {
		v := loadF(x[i:]).Merge(splat(float32(math.Inf(-1))), lanes(len(x)-i))
		m = m.Max(v)
		nan = v.Merge(nan, v.IsNaN())
	}
	var b [W]float32
	m.Store(&b)
	s := hsum(nan)
	if s != s {
		return s
	}
	return simd.Portable.Max(b[:])
}

// expV is simd.Exp32 on W lanes.
func expV(x vf) vf {
	x = x.Max(splat(simd.ExpLo)).Min(splat(simd.ExpHi))
	t := x.MulAdd(splat(simd.Log2E), splat(simd.RoundMag))
	n := t.Sub(splat(simd.RoundMag))
	r := n.MulAdd(splat(-simd.Ln2Hi), x)
	r = n.MulAdd(splat(-simd.Ln2Lo), r)
	p := splat(simd.ExpP0)
	p = p.MulAdd(r, splat(simd.ExpP1))
	p = p.MulAdd(r, splat(simd.ExpP2))
	p = p.MulAdd(r, splat(simd.ExpP3))
	p = p.MulAdd(r, splat(simd.ExpP4))
	p = p.MulAdd(r, splat(simd.ExpP5))
	p = p.MulAdd(r.Mul(r), r.Add(splat(1)))
	// 2^n: the low bits of t hold n + the magic's own integer bits.
	e := asI(t).Sub(asI(splat(simd.RoundMag))).Add(splatI(127)).ShiftAllLeft(23)
	return p.Mul(asF(e))
}

// withNaN returns y with NaN wherever x is NaN (the clamp in expV loses it).
func withNaN(y, x vf) vf { return x.Merge(y, x.IsNaN()) }

func sigmoidV(x vf) vf {
	one := splat(1)
	return one.Div(one.Add(expV(zero().Sub(x))))
}

func absV(x vf) vf { return asF(asI(x).And(splatI(0x7fffffff))) }

func erfV(x vf) vf {
	ax := absV(x)
	t := splat(1).Div(ax.MulAdd(splat(simd.ErfP), splat(1)))
	p := splat(simd.ErfA5)
	p = p.MulAdd(t, splat(simd.ErfA4))
	p = p.MulAdd(t, splat(simd.ErfA3))
	p = p.MulAdd(t, splat(simd.ErfA2))
	p = p.MulAdd(t, splat(simd.ErfA1))
	y := splat(1).Sub(p.Mul(t).Mul(expV(zero().Sub(ax.Mul(ax)))))
	sign := asI(x).And(splatI(-0x80000000))
	return asF(asI(y).Or(sign))
}

func geluErfV(x vf) vf {
	half := splat(0.5)
	cdf := half.Add(half.Mul(erfV(x.Mul(splat(simd.Sqrt1_2)))))
	return withNaN(x.Mul(cdf), x)
}

func geluErfGradV(dy, x vf) vf {
	half := splat(0.5)
	cdf := half.Add(half.Mul(erfV(x.Mul(splat(simd.Sqrt1_2)))))
	pdf := expV(splat(-0.5).Mul(x).Mul(x)).Mul(splat(simd.InvSqrt2Pi))
	return withNaN(dy.Mul(x.MulAdd(pdf, cdf)), x)
}

// geluTanhSigmoid is sigmoid(2u) and du/dx, as simd.geluTanhSigmoid.
func geluTanhSigmoid(x vf) (s, du vf) {
	x2 := x.Mul(x)
	k := splat(simd.GeluTanhK)
	u := k.Mul(x).Mul(x2.MulAdd(splat(simd.GeluTanhC), splat(1)))
	return sigmoidV(u.Add(u)), k.Mul(x2.MulAdd(splat(3*simd.GeluTanhC), splat(1)))
}

func geluTanhV(x vf) vf {
	s, _ := geluTanhSigmoid(x)
	return withNaN(x.Mul(s), x)
}

func geluTanhGradV(dy, x vf) vf {
	s, du := geluTanhSigmoid(x)
	ds := s.Mul(splat(1).Sub(s)).Mul(du).Mul(x.Add(x))
	return withNaN(dy.Mul(s.Add(ds)), x)
}

func siluV(x vf) vf { return withNaN(x.Mul(sigmoidV(x)), x) }

func siluGradV(dy, x vf) vf {
	s := sigmoidV(x)
	return withNaN(dy.Mul(s).Mul(x.MulAdd(splat(1).Sub(s), splat(1))), x)
}

func unary(f func(vf) vf) func(dst, x []float32) {
	return func(dst, x []float32) {
		dst = dst[:len(x)]
		for i := 0; i < len(x); i += W {
			storeF(f(loadF(x[i:])), dst[i:])
		}
		archsimd.ClearAVXUpperBits()
	}
}

func binary(f func(dy, x vf) vf) func(dst, dy, x []float32) {
	return func(dst, dy, x []float32) {
		dst, dy = dst[:len(x)], dy[:len(x)]
		for i := 0; i < len(x); i += W {
			storeF(f(loadF(dy[i:]), loadF(x[i:])), dst[i:])
		}
		archsimd.ClearAVXUpperBits()
	}
}

func expSum(x []float32, m float32) float32 {
	var acc vf
	mv := splat(m)
	for i := 0; i < len(x); i += W {
		v := loadF(x[i:])
		e := withNaN(expV(v.Sub(mv)), v)
		acc = acc.Add(e.Merge(zero(), lanes(len(x)-i)))
	}
	return hsum(acc)
}

func expScale(dst, x []float32, m, s float32) {
	mv, sv := splat(m), splat(s)
	dst = dst[:len(x)]
	for i := 0; i < len(x); i += W {
		d := loadF(x[i:]).Sub(mv)
		storeF(withNaN(expV(d), d).Mul(sv), dst[i:])
	}
	archsimd.ClearAVXUpperBits()
}

func add(dst, a, b []float32) {
	a, b = a[:len(dst)], b[:len(dst)]
	for i := 0; i < len(dst); i += W {
		storeF(loadF(a[i:]).Add(loadF(b[i:])), dst[i:])
	}
	archsimd.ClearAVXUpperBits()
}

func mul(dst, a, b []float32) {
	a, b = a[:len(dst)], b[:len(dst)]
	for i := 0; i < len(dst); i += W {
		storeF(loadF(a[i:]).Mul(loadF(b[i:])), dst[i:])
	}
	archsimd.ClearAVXUpperBits()
}

func normalize(dst, x, w, b []float32, mean, rstd float32) {
	mv, rv := splat(mean), splat(rstd)
	x = x[:len(dst)]
	switch {
	case w != nil && b != nil:
		w, b = w[:len(dst)], b[:len(dst)]
		for i := 0; i < len(dst); i += W {
			v := loadF(x[i:]).Sub(mv).Mul(rv)
			storeF(v.MulAdd(loadF(w[i:]), loadF(b[i:])), dst[i:])
		}
	case w != nil:
		w = w[:len(dst)]
		for i := 0; i < len(dst); i += W {
			storeF(loadF(x[i:]).Sub(mv).Mul(rv).Mul(loadF(w[i:])), dst[i:])
		}
	case b != nil:
		b = b[:len(dst)]
		for i := 0; i < len(dst); i += W {
			storeF(loadF(x[i:]).Sub(mv).MulAdd(rv, loadF(b[i:])), dst[i:])
		}
	default:
		for i := 0; i < len(dst); i += W {
			storeF(loadF(x[i:]).Sub(mv).Mul(rv), dst[i:])
		}
	}
	archsimd.ClearAVXUpperBits()
}

func normGrad(dst, g, x []float32, c, d, s float32) {
	cv, dv, sv := splat(-c), splat(d), splat(s)
	g, x = g[:len(dst)], x[:len(dst)]
	for i := 0; i < len(dst); i += W {
		storeF(loadF(x[i:]).MulAdd(cv, loadF(g[i:])).Sub(dv).Mul(sv), dst[i:])
	}
	archsimd.ClearAVXUpperBits()
}

func softmaxGrad(dst, y, dy []float32, d float32) {
	dv := splat(d)
	y, dy = y[:len(dst)], dy[:len(dst)]
	for i := 0; i < len(dst); i += W {
		storeF(loadF(dy[i:]).Sub(dv).Mul(loadF(y[i:])), dst[i:])
	}
	archsimd.ClearAVXUpperBits()
}

func fmAcc(acc, a, b []float32, s float32) {
	sv := splat(s)
	a, b = a[:len(acc)], b[:len(acc)]
	for i := 0; i < len(acc); i += W {
		storeF(loadF(a[i:]).Mul(loadF(b[i:])).MulAdd(sv, loadF(acc[i:])), acc[i:])
	}
	archsimd.ClearAVXUpperBits()
}

func bf16ToF32(dst []float32, src []uint16) {
	dst = dst[:len(src)]
	for i := 0; i < len(src); i += W {
		storeF(asF(loadU16(src[i:]).ShiftAllLeft(16)), dst[i:])
	}
	archsimd.ClearAVXUpperBits()
}

func f32ToBF16(dst []uint16, src []float32) {
	dst = dst[:len(src)]
	for i := 0; i < len(src); i += W {
		u := asI(loadF(src[i:]))
		odd := u.ShiftAllRight(16).And(splatI(1))
		r := u.Add(splatI(0x7fff)).Add(odd).ShiftAllRight(16)
		quiet := u.ShiftAllRight(16).Or(splatI(0x40))
		nan := u.And(splatI(0x7fffffff)).Greater(splatI(0x7f800000))
		storeU16(quiet.Merge(r, nan), dst[i:])
	}
	archsimd.ClearAVXUpperBits()
}

func f16ToF32(dst []float32, src []uint16) {
	dst = dst[:len(src)]
	for i := 0; i < len(src); i += W {
		h := loadU16(src[i:])
		em := h.And(splatI(0x7fff)).ShiftAllLeft(13)
		f := asF(em).Mul(splat(0x1p112))
		special := asF(em.Or(splatI(0x7f800000)))
		f = special.Merge(f, em.Greater(splatI(0x7c00<<13-1)))
		sign := h.And(splatI(0x8000)).ShiftAllLeft(16)
		storeF(asF(asI(f).Or(sign)), dst[i:])
	}
	archsimd.ClearAVXUpperBits()
}

func f32ToF16(dst []uint16, src []float32) {
	dst = dst[:len(src)]
	for i := 0; i < len(src); i += W {
		u := asI(loadF(src[i:]))
		a := u.And(splatI(0x7fffffff))
		sign := u.ShiftAllRight(16).And(splatI(0x8000))
		normal := a.Add(splatI(0xfff - 0x38000000)).Add(a.ShiftAllRight(13).And(splatI(1))).ShiftAllRight(13)
		sub := asI(asF(a).Add(splat(0.5))).Sub(splatI(0x3f000000))
		o := sub.Merge(normal, a.Less(splatI(0x38800000)))
		o = splatI(0x7c00).Merge(o, a.Greater(splatI(0x47800000-1)))
		o = splatI(0x7e00).Merge(o, a.Greater(splatI(0x7f800000)))
		storeU16(o.Or(sign), dst[i:])
	}
	archsimd.ClearAVXUpperBits()
}
