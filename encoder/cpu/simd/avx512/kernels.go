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
	Add:          add,
	Mul:          mul,
	Normalize:    normalize,
	NormGrad:     normGrad,
	SoftmaxGrad:  softmaxGrad,
	FMAcc:        fmAcc,
	Axpy:         axpy,
	AdamW:        adamW,
	Reflect:      reflect,
	Lanes:        W,
	QRLanes:      qrLanes,
	GeluErf:      geluErf,
	GeluTanh:     geluTanh,
	Silu:         silu,
	GeluErfGrad:  geluErfGrad,
	GeluTanhGrad: geluTanhGrad,
	SiluGrad:     siluGrad,
	BF16ToF32:    bf16ToF32,
	F16ToF32:     f16ToF32,
	F32ToBF16:    f32ToBF16,
	F32ToF16:     f32ToF16,
}

// The loops are pure vector code and every primitive ends with
// ClearAVXUpperBits before any scalar float code runs: a legacy-SSE
// instruction (Go's scalar float code) executed while the upper vector
// halves are dirty costs hundreds of cycles. Tails use one partial load and
// store instead of a scalar loop for the same reason.

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

// full is len(x) rounded down to whole vectors.
func full(n int) int { return n &^ (W - 1) }

func sum(x []float32) float32 {
	var a0, a1 vf
	i, n := 0, full(len(x))
	for ; i+2*W <= n; i += 2 * W {
		a0 = a0.Add(load(x[i:]))
		a1 = a1.Add(load(x[i+W:]))
	}
	for ; i < n; i += W {
		a0 = a0.Add(load(x[i:]))
	}
	if n < len(x) {
		a1 = a1.Add(loadPart(x[n:]))
	}
	return hsum(a0.Add(a1))
}

func sumSq(x []float32) float32 {
	var a0, a1 vf
	i, n := 0, full(len(x))
	for ; i+2*W <= n; i += 2 * W {
		v0, v1 := load(x[i:]), load(x[i+W:])
		a0 = v0.MulAdd(v0, a0)
		a1 = v1.MulAdd(v1, a1)
	}
	for ; i < n; i += W {
		v := load(x[i:])
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
		a0 = load(a[i:]).MulAdd(load(b[i:]), a0)
		a1 = load(a[i+W:]).MulAdd(load(b[i+W:]), a1)
	}
	for ; i < n; i += W {
		a0 = load(a[i:]).MulAdd(load(b[i:]), a0)
	}
	if n < len(a) {
		a1 = loadPart(a[n:]).MulAdd(loadPart(b[n:]), a1)
	}
	return hsum(a0.Add(a1))
}

// maxOf propagates NaN like the portable Max: a lane that saw NaN stays NaN.
func maxOf(x []float32) float32 {
	m, nan := splat(float32(math.Inf(-1))), zero()
	n := full(len(x))
	for i := 0; i < n; i += W {
		v := load(x[i:])
		m = m.Max(v)
		nan = v.Merge(nan, v.IsNaN())
	}
	if n < len(x) {
		v := loadPart(x[n:]).Merge(splat(float32(math.Inf(-1))), lanes(len(x)-n))
		m = m.Max(v)
		nan = v.Merge(nan, v.IsNaN())
	}
	var b [W]float32
	m.Store(&b)
	if s := hsum(nan); s != s {
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
// The activations need no such step: their results are products with x.
func withNaN(y, x vf) vf { return x.Merge(y, x.IsNaN()) }

// newton refines an estimate r of 1/q: each step doubles its bits.
func newton(q, r vf) vf { return r.Mul(splat(2).Sub(q.Mul(r))) }

func sigmoidV(x vf) vf { return recip(splat(1).Add(expV(zero().Sub(x)))) }

// sigmoidPair is simd.sigmoidPair: sigmoid(x) and 1 - sigmoid(x) without
// cancellation.
func sigmoidPair(x vf) (s, c vf) {
	e := expV(zero().Sub(x))
	s = recip(splat(1).Add(e))
	return s, splat(1).Sub(s).Merge(e.Mul(s), x.Less(zero()))
}

// erfV is simd.Erf32 on W lanes.
func erfV(x vf) vf {
	c := x.Max(splat(-simd.ErfClamp)).Min(splat(simd.ErfClamp))
	x2 := c.Mul(c)
	p := splat(simd.ErfP13)
	p = p.MulAdd(x2, splat(simd.ErfP11))
	p = p.MulAdd(x2, splat(simd.ErfP9))
	p = p.MulAdd(x2, splat(simd.ErfP7))
	p = p.MulAdd(x2, splat(simd.ErfP5))
	p = p.MulAdd(x2, splat(simd.ErfP3))
	p = p.MulAdd(x2, splat(simd.ErfP1))
	q := splat(simd.ErfQ8)
	q = q.MulAdd(x2, splat(simd.ErfQ6))
	q = q.MulAdd(x2, splat(simd.ErfQ4))
	q = q.MulAdd(x2, splat(simd.ErfQ2))
	q = q.MulAdd(x2, splat(simd.ErfQ0))
	return c.Mul(p).Mul(recip(q))
}

// cdfV is 0.5(1 + erf(x/sqrt2)), exactly 0 below the erf's clamp: there
// the approximation's last bit (which the reciprocal estimate of each CPU
// model decides) would leave x*cdf far from 0 for large negative x.
func cdfV(x vf) vf {
	half := splat(0.5)
	cdf := half.Add(half.Mul(erfV(x.Mul(splat(simd.Sqrt1_2)))))
	return zero().Merge(cdf, x.Less(splat(-simd.ErfClamp/simd.Sqrt1_2)))
}

func geluErfV(x vf) vf { return x.Mul(cdfV(x)) }

func geluErfGradV(dy, x vf) vf {
	cdf := cdfV(x)
	pdf := expV(splat(-0.5).Mul(x).Mul(x)).Mul(splat(simd.InvSqrt2Pi))
	return dy.Mul(x.MulAdd(pdf, cdf))
}

// geluTanhU is u = sqrt(2/pi)(x + 0.044715x^3) and du/dx.
func geluTanhU(x vf) (u, du vf) {
	x2 := x.Mul(x)
	k := splat(simd.GeluTanhK)
	return k.Mul(x).Mul(x2.MulAdd(splat(simd.GeluTanhC), splat(1))), k.Mul(x2.MulAdd(splat(3*simd.GeluTanhC), splat(1)))
}

func geluTanhV(x vf) vf {
	u, _ := geluTanhU(x)
	return x.Mul(sigmoidV(u.Add(u)))
}

func geluTanhGradV(dy, x vf) vf {
	u, du := geluTanhU(x)
	s, c := sigmoidPair(u.Add(u))
	ds := s.Mul(c).Mul(du).Mul(x.Add(x))
	return dy.Mul(s.Add(ds))
}

func siluV(x vf) vf { return x.Mul(sigmoidV(x)) }

func siluGradV(dy, x vf) vf {
	s, c := sigmoidPair(x)
	return dy.Mul(s).Mul(x.MulAdd(c, splat(1)))
}

// The activations are named functions handing their vector function to
// unary or binary, so that each loop is compiled with its function inlined.
// (As closures built in the Table's initializer they were compiled without
// inlining: every vector cost three calls.)
func geluErf(dst, x []float32)          { unary(dst, x, geluErfV) }
func geluTanh(dst, x []float32)         { unary(dst, x, geluTanhV) }
func silu(dst, x []float32)             { unary(dst, x, siluV) }
func geluErfGrad(dst, dy, x []float32)  { binary(dst, dy, x, geluErfGradV) }
func geluTanhGrad(dst, dy, x []float32) { binary(dst, dy, x, geluTanhGradV) }
func siluGrad(dst, dy, x []float32)     { binary(dst, dy, x, siluGradV) }

func unary(dst, x []float32, f func(vf) vf) {
	dst = dst[:len(x)]
	n := full(len(x))
	for i := 0; i < n; i += W {
		store(f(load(x[i:])), dst[i:])
	}
	if n < len(x) {
		storePart(f(loadPart(x[n:])), dst[n:])
	}
	archsimd.ClearAVXUpperBits()
}

func binary(dst, dy, x []float32, f func(dy, x vf) vf) {
	dst, dy = dst[:len(x)], dy[:len(x)]
	n := full(len(x))
	for i := 0; i < n; i += W {
		store(f(load(dy[i:]), load(x[i:])), dst[i:])
	}
	if n < len(x) {
		storePart(f(loadPart(dy[n:]), loadPart(x[n:])), dst[n:])
	}
	archsimd.ClearAVXUpperBits()
}

func expSum(dst, x []float32, m float32) float32 {
	var acc vf
	mv := splat(m)
	dst = dst[:len(x)]
	n := full(len(x))
	for i := 0; i < n; i += W {
		d := load(x[i:]).Sub(mv)
		e := withNaN(expV(d), d)
		store(e, dst[i:])
		acc = acc.Add(e)
	}
	if n < len(x) {
		d := loadPart(x[n:]).Sub(mv)
		e := withNaN(expV(d), d)
		storePart(e, dst[n:])
		acc = acc.Add(e.Merge(zero(), lanes(len(x)-n)))
	}
	return hsum(acc)
}

func add(dst, a, b []float32) {
	a, b = a[:len(dst)], b[:len(dst)]
	n := full(len(dst))
	for i := 0; i < n; i += W {
		store(load(a[i:]).Add(load(b[i:])), dst[i:])
	}
	if n < len(dst) {
		storePart(loadPart(a[n:]).Add(loadPart(b[n:])), dst[n:])
	}
	archsimd.ClearAVXUpperBits()
}

func mul(dst, a, b []float32) {
	a, b = a[:len(dst)], b[:len(dst)]
	n := full(len(dst))
	for i := 0; i < n; i += W {
		store(load(a[i:]).Mul(load(b[i:])), dst[i:])
	}
	if n < len(dst) {
		storePart(loadPart(a[n:]).Mul(loadPart(b[n:])), dst[n:])
	}
	archsimd.ClearAVXUpperBits()
}

// normalize handles its optional w and b by loading ones and zeros from a
// vector-sized array for the missing one, so one loop serves all four cases.
func normalize(dst, x, w, b []float32, mean, rstd float32) {
	mv, rv := splat(mean), splat(rstd)
	x = x[:len(dst)]
	n := full(len(dst))
	switch {
	case w != nil && b != nil:
		w, b = w[:len(dst)], b[:len(dst)]
		for i := 0; i < n; i += W {
			store(load(x[i:]).Sub(mv).Mul(rv).MulAdd(load(w[i:]), load(b[i:])), dst[i:])
		}
		if n < len(dst) {
			storePart(loadPart(x[n:]).Sub(mv).Mul(rv).MulAdd(loadPart(w[n:]), loadPart(b[n:])), dst[n:])
		}
	case w != nil:
		w = w[:len(dst)]
		for i := 0; i < n; i += W {
			store(load(x[i:]).Sub(mv).Mul(rv).Mul(load(w[i:])), dst[i:])
		}
		if n < len(dst) {
			storePart(loadPart(x[n:]).Sub(mv).Mul(rv).Mul(loadPart(w[n:])), dst[n:])
		}
	default:
		bv := zero()
		for i := 0; i < n; i += W {
			if b != nil {
				bv = load(b[i:])
			}
			store(load(x[i:]).Sub(mv).MulAdd(rv, bv), dst[i:])
		}
		if n < len(dst) {
			if b != nil {
				bv = loadPart(b[n:])
			}
			storePart(loadPart(x[n:]).Sub(mv).MulAdd(rv, bv), dst[n:])
		}
	}
	archsimd.ClearAVXUpperBits()
}

func normGrad(dst, g, x []float32, c, d, s float32) {
	cv, dv, sv := splat(-c), splat(d), splat(s)
	g, x = g[:len(dst)], x[:len(dst)]
	n := full(len(dst))
	for i := 0; i < n; i += W {
		store(load(x[i:]).MulAdd(cv, load(g[i:])).Sub(dv).Mul(sv), dst[i:])
	}
	if n < len(dst) {
		storePart(loadPart(x[n:]).MulAdd(cv, loadPart(g[n:])).Sub(dv).Mul(sv), dst[n:])
	}
	archsimd.ClearAVXUpperBits()
}

func softmaxGrad(dst, y, dy []float32, d float32) {
	dv := splat(d)
	y, dy = y[:len(dst)], dy[:len(dst)]
	n := full(len(dst))
	for i := 0; i < n; i += W {
		store(load(dy[i:]).Sub(dv).Mul(load(y[i:])), dst[i:])
	}
	if n < len(dst) {
		storePart(loadPart(dy[n:]).Sub(dv).Mul(loadPart(y[n:])), dst[n:])
	}
	archsimd.ClearAVXUpperBits()
}

func fmAcc(acc, a, b []float32, s float32) {
	sv := splat(s)
	a, b = a[:len(acc)], b[:len(acc)]
	n := full(len(acc))
	for i := 0; i < n; i += W {
		store(load(a[i:]).Mul(load(b[i:])).MulAdd(sv, load(acc[i:])), acc[i:])
	}
	if n < len(acc) {
		storePart(loadPart(a[n:]).Mul(loadPart(b[n:])).MulAdd(sv, loadPart(acc[n:])), acc[n:])
	}
	archsimd.ClearAVXUpperBits()
}

func axpy(dst, x []float32, s float32) {
	sv := splat(s)
	x = x[:len(dst)]
	n := full(len(dst))
	for i := 0; i < n; i += W {
		store(load(x[i:]).MulAdd(sv, load(dst[i:])), dst[i:])
	}
	if n < len(dst) {
		storePart(loadPart(x[n:]).MulAdd(sv, loadPart(dst[n:])), dst[n:])
	}
	archsimd.ClearAVXUpperBits()
}

func bf16ToF32(dst []float32, src []uint16) {
	dst = dst[:len(src)]
	n := full(len(src))
	for i := 0; i < n; i += W {
		store(asF(loadU16(src[i:]).ShiftAllLeft(16)), dst[i:])
	}
	if n < len(src) {
		storePart(asF(loadU16Part(src[n:]).ShiftAllLeft(16)), dst[n:])
	}
	archsimd.ClearAVXUpperBits()
}

func roundBF16(u vi) vi {
	odd := u.ShiftAllRight(16).And(splatI(1))
	r := u.Add(splatI(0x7fff)).Add(odd).ShiftAllRight(16)
	quiet := u.ShiftAllRight(16).Or(splatI(0x40))
	return quiet.Merge(r, u.And(splatI(0x7fffffff)).Greater(splatI(0x7f800000)))
}

func f32ToBF16(dst []uint16, src []float32) {
	dst = dst[:len(src)]
	n := full(len(src))
	for i := 0; i < n; i += W {
		storeU16(roundBF16(asI(load(src[i:]))), dst[i:])
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
		store(widenF16(loadU16(src[i:])), dst[i:])
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
		storeU16(roundF16(asI(load(src[i:]))), dst[i:])
	}
	if n < len(src) {
		storeU16Part(roundF16(asI(loadPart(src[n:]))), dst[n:])
	}
	archsimd.ClearAVXUpperBits()
}

// adamW is simd.Portable.AdamW on W lanes (with a true division and square
// root: the step must match PyTorch's within rounding).
func adamW(h *simd.AdamW, p, g, m, v, vmax []float32) {
	sign, decay, b1, b2 := splat(h.Sign), splat(h.Decay), splat(1-h.Beta1), splat(h.Beta2)
	nb2, lr, inv, eps := splat(1-h.Beta2), splat(h.StepSize), splat(h.InvBC2Sqrt), splat(h.Eps)
	g, m, v = g[:len(p)], m[:len(p)], v[:len(p)]
	step := func(pv, gv, mv, vv, xv vf) (vf, vf, vf, vf) {
		gv = gv.Mul(sign)
		mv = gv.Sub(mv).MulAdd(b1, mv)
		vv = vv.Mul(b2).Add(gv.Mul(gv).Mul(nb2))
		use := vv
		if vmax != nil {
			xv = xv.Max(vv)
			use = xv
		}
		denom := use.Sqrt().MulAdd(inv, eps)
		return pv.Mul(decay).Sub(lr.Mul(mv).Div(denom)), mv, vv, xv
	}
	n := full(len(p))
	for i := 0; i < n; i += W {
		xv := zero()
		if vmax != nil {
			xv = load(vmax[i:])
		}
		pv, mv, vv, xv := step(load(p[i:]), load(g[i:]), load(m[i:]), load(v[i:]), xv)
		store(pv, p[i:])
		store(mv, m[i:])
		store(vv, v[i:])
		if vmax != nil {
			store(xv, vmax[i:])
		}
	}
	if n < len(p) {
		xv := zero()
		if vmax != nil {
			xv = loadPart(vmax[n:])
		}
		pv, mv, vv, xv := step(loadPart(p[n:]), loadPart(g[n:]), loadPart(m[n:]), loadPart(v[n:]), xv)
		storePart(pv, p[n:])
		storePart(mv, m[n:])
		storePart(vv, v[n:])
		if vmax != nil {
			storePart(xv, vmax[n:])
		}
	}
	archsimd.ClearAVXUpperBits()
}

// reflect is simd.Portable.Reflect, vectorized two ways. Short blocks (up
// to reflectBlockRows rows) go by column blocks: w for four vectors of
// columns stays in registers while the rows stream past twice (w = v^T a,
// then a -= tau v w), so w is never stored. Taller ones stream whole rows
// with w in memory: a column block of a tall matrix is a strided walk
// (measured: 128x128 matrices 1.5x faster by blocks, 1024x1024 1.4x slower).
func reflect(a []float32, ld, rows, cols int, v []float32, tau float32, w []float32) {
	if rows > reflectBlockRows {
		reflectRows(a, ld, rows, cols, v, tau, w)
		return
	}
	nt := splat(-tau)
	n := full(cols)
	c := 0
	for ; c+4*W <= n; c += 4 * W {
		var w0, w1, w2, w3 vf
		for i := range rows {
			row, vi := a[i*ld+c:], broadcastAt(v, i)
			w0 = load(row).MulAdd(vi, w0)
			w1 = load(row[W:]).MulAdd(vi, w1)
			w2 = load(row[2*W:]).MulAdd(vi, w2)
			w3 = load(row[3*W:]).MulAdd(vi, w3)
		}
		for i := range rows {
			row, s := a[i*ld+c:], broadcastAt(v, i).Mul(nt)
			store(w0.MulAdd(s, load(row)), row)
			store(w1.MulAdd(s, load(row[W:])), row[W:])
			store(w2.MulAdd(s, load(row[2*W:])), row[2*W:])
			store(w3.MulAdd(s, load(row[3*W:])), row[3*W:])
		}
	}
	for ; c < n; c += W {
		var w0 vf
		for i := range rows {
			w0 = load(a[i*ld+c:]).MulAdd(broadcastAt(v, i), w0)
		}
		for i := range rows {
			row := a[i*ld+c:]
			store(w0.MulAdd(broadcastAt(v, i).Mul(nt), load(row)), row)
		}
	}
	if c < cols {
		var w0 vf
		for i := range rows {
			w0 = loadPart(a[i*ld+c:i*ld+cols]).MulAdd(broadcastAt(v, i), w0)
		}
		for i := range rows {
			row := a[i*ld+c : i*ld+cols]
			storePart(w0.MulAdd(broadcastAt(v, i).Mul(nt), loadPart(row)), row)
		}
	}
	archsimd.ClearAVXUpperBits()
}

// reflectBlockRows is the most rows reflect walks by column blocks.
const reflectBlockRows = 256

// reflectRows is reflect streaming whole rows, w (cols floats) in memory.
func reflectRows(a []float32, ld, rows, cols int, v []float32, tau float32, w []float32) {
	w = w[:cols]
	n := full(cols)
	for c := 0; c < cols; c += W {
		if c < n {
			store(zero(), w[c:])
		} else {
			storePart(zero(), w[c:])
		}
	}
	for i := range rows {
		row, vi := a[i*ld:i*ld+cols], broadcastAt(v, i)
		c := 0
		for ; c < n; c += W {
			store(load(row[c:]).MulAdd(vi, load(w[c:])), w[c:])
		}
		if c < cols {
			storePart(loadPart(row[c:]).MulAdd(vi, loadPart(w[c:])), w[c:])
		}
	}
	nt := splat(-tau)
	for i := range rows {
		row, s := a[i*ld:i*ld+cols], broadcastAt(v, i).Mul(nt)
		c := 0
		for ; c < n; c += W {
			store(load(w[c:]).MulAdd(s, load(row[c:])), row[c:])
		}
		if c < cols {
			storePart(loadPart(w[c:]).MulAdd(s, loadPart(row[c:])), row[c:])
		}
	}
	archsimd.ClearAVXUpperBits()
}

// qrLanes is Householder QR of W matrices at once, lane l holding matrix l:
// a is m x n interleaved (element (i, j) of every matrix in the W floats at
// (i*n + j)*W), factored in place into R (upper triangle) and the reflector
// tails (below it); q, when not nil, receives Q (m x qCols, interleaved) for
// qCols = min(m, n) or m. Every step is the scalar algorithm (LAPACK's geqr2
// and org2r, its sign convention) on vectors, so there are no horizontal
// operations. scratch holds min(m, n)*W floats (the taus). Each reflector
// is built from its column divided by the column's largest magnitude (tau
// and the reflector do not depend on the scale; only beta is scaled back),
// so columns of 1e-30, 1e30, or of denormal rounding residue (whose
// reciprocal overflows float32) neither underflow nor overflow.
func qrLanes(a []float32, m, n int, q []float32, qCols int, scratch []float32) {
	k, rs := min(m, n), n*W // rs: one matrix row of a, interleaved
	one, absMask := splat(1), splatI(0x7fffffff)
	for j := range k {
		alpha := load(a[j*rs+j*W:])
		mx := asF(asI(alpha).And(absMask))
		for i := j + 1; i < m; i++ {
			mx = mx.Max(asF(asI(load(a[i*rs+j*W:])).And(absMask)))
		}
		safe := one.Merge(mx, mx.Equal(zero())) // a zero column divides by 1
		// x / safe as (x * pre) * inv: pre = 2^64 lifts a denormal maximum
		// (its reciprocal would overflow) exactly into the normal range
		pre := splat(0x1p64).Merge(one, mx.Less(splat(0x1p-64)))
		inv := one.Div(safe.Mul(pre))
		var ss vf
		for i := j + 1; i < m; i++ {
			x := load(a[i*rs+j*W:]).Mul(pre).Mul(inv)
			ss = x.MulAdd(x, ss)
		}
		an := alpha.Mul(pre).Mul(inv)
		sign := asI(alpha).And(splatI(-0x80000000))
		bn := asF(asI(an.MulAdd(an, ss).Sqrt()).Or(sign)).Mul(splat(-1)) // -copysign(norm, alpha), scaled
		keep := ss.Equal(zero())                                         // nothing below the diagonal: H = I
		tau := zero().Merge(bn.Sub(an).Div(bn), keep)
		div := one.Div(an.Sub(bn)) // the tail x / (alpha - beta), as x * pre * inv * div
		store(alpha.Merge(bn.Mul(safe), keep), a[j*rs+j*W:])
		for i := j + 1; i < m; i++ {
			x := load(a[i*rs+j*W:])
			store(x.Merge(x.Mul(pre).Mul(inv).Mul(div), keep), a[i*rs+j*W:])
		}
		store(tau, scratch[j*W:])
		reflectLanes(a, rs, j+1, n, a, rs, j, m, tau)
	}
	if q == nil {
		archsimd.ClearAVXUpperBits()
		return
	}
	qs := qCols * W
	for i := range m {
		for c := range qCols {
			if i == c {
				store(one, q[i*qs+c*W:])
			} else {
				store(zero(), q[i*qs+c*W:])
			}
		}
	}
	for j := k - 1; j >= 0; j-- {
		reflectLanes(q, qs, j, qCols, a, rs, j, m, load(scratch[j*W:]))
	}
	archsimd.ClearAVXUpperBits()
}

// reflectLanes applies reflector j of qrLanes (1 at row j, a's column j
// below it; rows of rs floats) to columns [from, to) of dst (rows of ds
// floats), rows j..m-1: x -= tau (v . x) v. Two columns a pass, so each
// reflector load serves both.
func reflectLanes(dst []float32, ds, from, to int, a []float32, rs, j, m int, tau vf) {
	c := from
	for ; c+1 < to; c += 2 {
		w0, w1 := load(dst[j*ds+c*W:]), load(dst[j*ds+(c+1)*W:])
		for i := j + 1; i < m; i++ {
			v := load(a[i*rs+j*W:])
			w0 = v.MulAdd(load(dst[i*ds+c*W:]), w0)
			w1 = v.MulAdd(load(dst[i*ds+(c+1)*W:]), w1)
		}
		t0, t1 := tau.Mul(w0), tau.Mul(w1)
		store(load(dst[j*ds+c*W:]).Sub(t0), dst[j*ds+c*W:])
		store(load(dst[j*ds+(c+1)*W:]).Sub(t1), dst[j*ds+(c+1)*W:])
		for i := j + 1; i < m; i++ {
			v := load(a[i*rs+j*W:])
			store(load(dst[i*ds+c*W:]).Sub(v.Mul(t0)), dst[i*ds+c*W:])
			store(load(dst[i*ds+(c+1)*W:]).Sub(v.Mul(t1)), dst[i*ds+(c+1)*W:])
		}
	}
	if c < to {
		w := load(dst[j*ds+c*W:])
		for i := j + 1; i < m; i++ {
			w = load(a[i*rs+j*W:]).MulAdd(load(dst[i*ds+c*W:]), w)
		}
		tw := tau.Mul(w)
		store(load(dst[j*ds+c*W:]).Sub(tw), dst[j*ds+c*W:])
		for i := j + 1; i < m; i++ {
			store(load(dst[i*ds+c*W:]).Sub(load(a[i*rs+j*W:]).Mul(tw)), dst[i*ds+c*W:])
		}
	}
}
