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
	Name:        isaName,
	SumSq:       sumSq,
	Max:         maxOf,
	Dot:         dot,
	SumDot:      sumDot,
	ShiftedSums: shiftedSums,
	MulSumDot:   mulSumDot,
	ExpSum:      expSum,
	Add:         add,
	Mul:         mul,
	Normalize:   normalize,
	BF16Rows: simd.BF16Rows{
		SumSq:       sumSqBF16,
		AddSumSq:    addSumSqBF16,
		ShiftedSums: shiftedSumsBF16,
		Normalize:   normalizeBF16,
		GradDots:    gradDotsBF16,
		GradAcc:     gradAccBF16,
		NormGrad:    normGradBF16,
	},
	NormGrad:     normGrad,
	SoftmaxGrad:  softmaxGrad,
	FMAcc:        fmAcc,
	AccMulSum:    accMulSum,
	Axpy:         axpy,
	AdamW:        adamW,
	Reflect:      reflect,
	VtC:          vtc,
	AddVW:        addVW,
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
	q := sumTo4(v)
	q = q.AddPairs(q)
	q = q.AddPairs(q)
	var b [4]float32
	q.Store(&b)
	archsimd.ClearAVXUpperBits()
	return b[0]
}

// full is len(x) rounded down to whole vectors.
func full(n int) int { return n &^ (W - 1) }

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

// Constant vectors for the transcendental pieces, loaded from memory: Go
// materializes a splat constant inside a loop on every iteration (a scalar
// load and a broadcast), and the pieces' loops hold more constants than it
// keeps in registers (measured: SiLU 1.4x faster so). Filled at package
// initialization in plain Go (no vector instruction runs before the CPU is
// known to have them).
type constVec [W]float32

func (c *constVec) v() vf { return loadArray((*[W]float32)(c)) }

func fill(f float32) (c constVec) {
	for i := range c {
		c[i] = f
	}
	return c
}

// Integer constants are bit patterns in a constVec (copying a float32
// keeps its bits), read as asI(k.v()).
var (
	kExpBias  = fill(math.Float32frombits(127))
	kLowBit   = fill(math.Float32frombits(1))
	kHalfULP  = fill(math.Float32frombits(0x7fff))   // bfloat16 rounding: half a unit less one
	kQuietBit = fill(math.Float32frombits(0x400000)) // a NaN's quiet bit
	kAbsBits  = fill(math.Float32frombits(0x7fffffff))
	kInfBits  = fill(math.Float32frombits(0x7f800000))
	kHighHalf = fill(math.Float32frombits(0xffff0000)) // a bfloat16 in the upper half
)

var (
	kExpLo       = fill(simd.ExpLo)
	kExpHi       = fill(simd.ExpHi)
	kLog2E       = fill(simd.Log2E)
	kRoundMag    = fill(simd.RoundMag)
	kNegLn2Hi    = fill(-simd.Ln2Hi)
	kNegLn2Lo    = fill(-simd.Ln2Lo)
	kExpP0       = fill(simd.ExpP0)
	kExpP1       = fill(simd.ExpP1)
	kExpP2       = fill(simd.ExpP2)
	kExpP3       = fill(simd.ExpP3)
	kExpP4       = fill(simd.ExpP4)
	kExpP5       = fill(simd.ExpP5)
	kOne         = fill(1)
	kTwo         = fill(2)
	kNegErfClamp = fill(-simd.ErfClamp)
	kErfClamp    = fill(simd.ErfClamp)
	kErfP13      = fill(simd.ErfP13)
	kErfP11      = fill(simd.ErfP11)
	kErfP9       = fill(simd.ErfP9)
	kErfP7       = fill(simd.ErfP7)
	kErfP5       = fill(simd.ErfP5)
	kErfP3       = fill(simd.ErfP3)
	kErfP1       = fill(simd.ErfP1)
	kErfQ8       = fill(simd.ErfQ8)
	kErfQ6       = fill(simd.ErfQ6)
	kErfQ4       = fill(simd.ErfQ4)
	kErfQ2       = fill(simd.ErfQ2)
	kErfQ0       = fill(simd.ErfQ0)
	kHalf        = fill(0.5)
	kCDFZero     = fill(-simd.ErfClamp / simd.Sqrt1_2)
	kGeluTanhK   = fill(simd.GeluTanhK)
	kGeluTanhC   = fill(simd.GeluTanhC)
	kGeluTanh3C  = fill(3 * simd.GeluTanhC)
	kSqrt1_2     = fill(simd.Sqrt1_2)
	kNegHalf     = fill(-0.5)
	kInvSqrt2Pi  = fill(simd.InvSqrt2Pi)
)

// The transcendental functions come in pieces that Go inlines (each under
// its inlining budget); whole, exp or erf is over it and stays a call, and a
// call per vector (its vectors passed through memory, the caller's live ones
// spilled around it) halved the activations' speed. So each kernel's loop
// composes the pieces itself: exp(x) is expScale(expArg(x)), erf below.

// expArg is exp's argument reduction (simd.Exp32) of x clamped to exp's
// range: expReduce(x clamped).
func expArg(x vf) (t, r vf) { return expReduce(x.Max(kExpLo.v()).Min(kExpHi.v())) }

// expReduce is the reduction of x in exp's range: t holding n = round(x /
// ln2) in its low bits, r = x - n ln2.
func expReduce(x vf) (t, r vf) {
	t = x.MulAdd(kLog2E.v(), kRoundMag.v())
	n := t.Sub(kRoundMag.v())
	r = n.MulAdd(kNegLn2Hi.v(), x)
	return t, n.MulAdd(kNegLn2Lo.v(), r)
}

// expScale is exp(r) 2^n from expArg's t and r.
func expScale(t, r vf) vf {
	p := kExpP0.v()
	p = p.MulAdd(r, kExpP1.v())
	p = p.MulAdd(r, kExpP2.v())
	p = p.MulAdd(r, kExpP3.v())
	p = p.MulAdd(r, kExpP4.v())
	p = p.MulAdd(r, kExpP5.v())
	p = p.MulAdd(r.Mul(r), r.Add(kOne.v()))
	// 2^n: the low bits of t hold n + the magic's own integer bits.
	e := asI(t).Sub(asI(kRoundMag.v())).Add(asI(kExpBias.v())).ShiftAllLeft(23)
	return p.Mul(asF(e))
}

// newton refines an estimate r of 1/q: each step doubles its bits.
func newton(q, r vf) vf { return r.Mul(kTwo.v().Sub(q.Mul(r))) }

// sigmoidOf is sigmoid(x) from e = exp(-x), exactly 0 below exp's clamp
// (where exp(-x) overflows float32), so that x*sigmoid(x) is -0 there and
// NaN at -inf, as PyTorch's x/(1 + exp(-x)); sigmoidPair also gives
// 1 - sigmoid(x) without cancellation.
func sigmoidOf(x, e vf) vf { return zero().Merge(recip(kOne.v().Add(e)), x.Less(kExpLo.v())) }
func sigmoidPair(x, e vf) (s, c vf) {
	s = sigmoidOf(x, e)
	return s, kOne.v().Sub(s).Merge(e.Mul(s), x.Less(zero()))
}

// erf(x) (simd.Erf32) is c P(c^2) / Q(c^2) for x clamped to c:
// erfRatio(c, erfP(x2), erfQ(x2)) with c, x2 from erfArg(x).
func erfArg(x vf) (c, x2 vf) {
	c = x.Max(kNegErfClamp.v()).Min(kErfClamp.v())
	return c, c.Mul(c)
}
func erfRatio(c, p, q vf) vf { return c.Mul(p).Mul(recip(q)) }
func erfP(x2 vf) vf {
	p := kErfP13.v()
	p = p.MulAdd(x2, kErfP11.v())
	p = p.MulAdd(x2, kErfP9.v())
	p = p.MulAdd(x2, kErfP7.v())
	p = p.MulAdd(x2, kErfP5.v())
	p = p.MulAdd(x2, kErfP3.v())
	return p.MulAdd(x2, kErfP1.v())
}
func erfQ(x2 vf) vf {
	q := kErfQ8.v()
	q = q.MulAdd(x2, kErfQ6.v())
	q = q.MulAdd(x2, kErfQ4.v())
	q = q.MulAdd(x2, kErfQ2.v())
	return q.MulAdd(x2, kErfQ0.v())
}

// cdfOf is the normal CDF 0.5(1 + erf) at x given erf = erf(x/sqrt2),
// exactly 0 below the erf's clamp: there the approximation's last bit
// (which the reciprocal estimate of each CPU model decides) would leave
// x*cdf far from 0 for large negative x.
func cdfOf(x, erf vf) vf {
	half := kHalf.v()
	return zero().Merge(half.Add(half.Mul(erf)), x.Less(kCDFZero.v()))
}

// geluTanhU is u = sqrt(2/pi)(x + 0.044715x^3) and du/dx.
func geluTanhU(x vf) (u, du vf) {
	x2 := x.Mul(x)
	k := kGeluTanhK.v()
	return k.Mul(x).Mul(x2.MulAdd(kGeluTanhC.v(), kOne.v())), k.Mul(x2.MulAdd(kGeluTanh3C.v(), kOne.v()))
}

// The activations: each loop runs over whole vectors; unary and binary add
// the tail through a vector-sized buffer. gelu(tanh) is x sigmoid(2u).

func geluErf(dst, x []float32) { unary(dst, x, geluErfVectors) }
func geluErfVectors(dst, x []float32) {
	for i := 0; i < len(x); i += W {
		v := load(x, i)
		c, c2 := erfArg(v.Mul(kSqrt1_2.v()))
		store(v.Mul(cdfOf(v, erfRatio(c, erfP(c2), erfQ(c2)))), dst, i)
	}
}

func geluTanh(dst, x []float32) { unary(dst, x, geluTanhVectors) }
func geluTanhVectors(dst, x []float32) {
	for i := 0; i < len(x); i += W {
		v := load(x, i)
		u, _ := geluTanhU(v)
		u2 := u.Add(u)
		store(v.Mul(sigmoidOf(u2, expScale(expArg(zero().Sub(u2))))), dst, i)
	}
}

func silu(dst, x []float32) { unary(dst, x, siluVectors) }
func siluVectors(dst, x []float32) {
	for i := 0; i < len(x); i += W {
		v := load(x, i)
		store(v.Mul(sigmoidOf(v, expScale(expArg(zero().Sub(v))))), dst, i)
	}
}

func geluErfGrad(dst, dy, x []float32) { binary(dst, dy, x, geluErfGradVectors) }
func geluErfGradVectors(dst, dy, x []float32) {
	for i := 0; i < len(x); i += W {
		v := load(x, i)
		c, c2 := erfArg(v.Mul(kSqrt1_2.v()))
		cdf := cdfOf(v, erfRatio(c, erfP(c2), erfQ(c2)))
		pdf := expScale(expArg(kNegHalf.v().Mul(v).Mul(v))).Mul(kInvSqrt2Pi.v())
		store(load(dy, i).Mul(v.MulAdd(pdf, cdf)), dst, i)
	}
}

func geluTanhGrad(dst, dy, x []float32) { binary(dst, dy, x, geluTanhGradVectors) }
func geluTanhGradVectors(dst, dy, x []float32) {
	for i := 0; i < len(x); i += W {
		v := load(x, i)
		u, du := geluTanhU(v)
		u2 := u.Add(u)
		s, c := sigmoidPair(u2, expScale(expArg(zero().Sub(u2))))
		ds := s.Mul(c).Mul(du).Mul(v.Add(v))
		store(load(dy, i).Mul(s.Add(ds)), dst, i)
	}
}

func siluGrad(dst, dy, x []float32) { binary(dst, dy, x, siluGradVectors) }
func siluGradVectors(dst, dy, x []float32) {
	for i := 0; i < len(x); i += W {
		v := load(x, i)
		s, c := sigmoidPair(v, expScale(expArg(zero().Sub(v))))
		store(load(dy, i).Mul(s).Mul(v.MulAdd(c, kOne.v())), dst, i)
	}
}

// unary runs f (a loop over whole vectors) on x's whole vectors, then on
// its tail copied into a vector-sized buffer.
func unary(dst, x []float32, f func(dst, x []float32)) {
	dst = dst[:len(x)]
	n := full(len(x))
	f(dst[:n], x[:n])
	if n < len(x) {
		var in, out [W]float32
		copy(in[:], x[n:])
		f(out[:], in[:])
		copy(dst[n:], out[:])
	}
	archsimd.ClearAVXUpperBits()
}

// binary is unary for two inputs.
func binary(dst, dy, x []float32, f func(dst, dy, x []float32)) {
	dst, dy = dst[:len(x)], dy[:len(x)]
	n := full(len(x))
	f(dst[:n], dy[:n], x[:n])
	if n < len(x) {
		var a, b, out [W]float32
		copy(a[:], dy[n:])
		copy(b[:], x[n:])
		f(out[:], a[:], b[:])
		copy(dst[n:], out[:])
	}
	archsimd.ClearAVXUpperBits()
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

func add(dst, a, b []float32) {
	a, b = a[:len(dst)], b[:len(dst)]
	n := full(len(dst))
	for i := 0; i < n; i += W {
		store(load(a, i).Add(load(b, i)), dst, i)
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
		store(load(a, i).Mul(load(b, i)), dst, i)
	}
	if n < len(dst) {
		storePart(loadPart(a[n:]).Mul(loadPart(b[n:])), dst[n:])
	}
	archsimd.ClearAVXUpperBits()
}

// normalize has a loop per case of w and b (a branch per vector in one
// shared loop made the weight-only case 1.4x slower in L1); without w, b
// is loaded where present and zero otherwise.
func normalize(dst, x, w, b []float32, mean, rstd float32) {
	mv, rv := splat(mean), splat(rstd)
	x = x[:len(dst)]
	n := full(len(dst))
	switch {
	case w != nil && b != nil:
		w, b = w[:len(dst)], b[:len(dst)]
		for i := 0; i < n; i += W {
			store(load(x, i).Sub(mv).Mul(rv).MulAdd(load(w, i), load(b, i)), dst, i)
		}
		if n < len(dst) {
			storePart(loadPart(x[n:]).Sub(mv).Mul(rv).MulAdd(loadPart(w[n:]), loadPart(b[n:])), dst[n:])
		}
	case w != nil:
		w = w[:len(dst)]
		for i := 0; i < n; i += W {
			store(load(x, i).Sub(mv).Mul(rv).Mul(load(w, i)), dst, i)
		}
		if n < len(dst) {
			storePart(loadPart(x[n:]).Sub(mv).Mul(rv).Mul(loadPart(w[n:])), dst[n:])
		}
	default:
		bv := zero()
		for i := 0; i < n; i += W {
			if b != nil {
				bv = load(b, i)
			}
			store(load(x, i).Sub(mv).MulAdd(rv, bv), dst, i)
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

// normVec is (x - mean) * rstd * w + b, normalizeBF16's expression for
// every case (ones and zeros standing in for an absent w and b): a result
// may differ from normalize's in its last float32 bit, and so, rarely, in
// its bfloat16 rounding.
func normVec(x, mv, rv, w, b vf) vf { return x.Sub(mv).Mul(rv).MulAdd(w, b) }

// partOr is v's tail from n, or absent for a nil v.
func partOr(v []float32, n int, absent vf) vf {
	if v == nil {
		return absent
	}
	return loadPart(v[n:])
}

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

func normGrad(dst, g, x []float32, shift, c, d, s float32) {
	shv, cv, dv, sv := splat(shift), splat(-c), splat(d), splat(s)
	g, x = g[:len(dst)], x[:len(dst)]
	n := full(len(dst))
	for i := 0; i < n; i += W {
		store(load(x, i).Sub(shv).MulAdd(cv, load(g, i)).Sub(dv).Mul(sv), dst, i)
	}
	if n < len(dst) {
		storePart(loadPart(x[n:]).Sub(shv).MulAdd(cv, loadPart(g[n:])).Sub(dv).Mul(sv), dst[n:])
	}
	archsimd.ClearAVXUpperBits()
}

func softmaxGrad(dst, y, dy []float32, d float32) {
	dv := splat(d)
	y, dy = y[:len(dst)], dy[:len(dst)]
	n := full(len(dst))
	for i := 0; i < n; i += W {
		store(load(dy, i).Sub(dv).Mul(load(y, i)), dst, i)
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
		store(load(a, i).Mul(load(b, i)).MulAdd(sv, load(acc, i)), acc, i)
	}
	if n < len(acc) {
		storePart(loadPart(a[n:]).Mul(loadPart(b[n:])).MulAdd(sv, loadPart(acc[n:])), acc[n:])
	}
	archsimd.ClearAVXUpperBits()
}

func accMulSum(accAB, accA, a, b []float32, shift, scale float32) {
	shv, scv := splat(shift), splat(scale)
	accA, a, b = accA[:len(accAB)], a[:len(accAB)], b[:len(accAB)]
	n := full(len(accAB))
	for i := 0; i < n; i += W {
		av := load(a, i)
		store(av.Mul(scv).MulAdd(load(b, i).Sub(shv), load(accAB, i)), accAB, i)
		store(load(accA, i).Add(av), accA, i)
	}
	if n < len(accAB) {
		av := loadPart(a[n:])
		storePart(av.Mul(scv).MulAdd(loadPart(b[n:]).Sub(shv), loadPart(accAB[n:])), accAB[n:])
		storePart(loadPart(accA[n:]).Add(av), accA[n:])
	}
	archsimd.ClearAVXUpperBits()
}

func axpy(dst, x []float32, s float32) {
	sv := splat(s)
	x = x[:len(dst)]
	n := full(len(dst))
	for i := 0; i < n; i += W {
		store(load(x, i).MulAdd(sv, load(dst, i)), dst, i)
	}
	if n < len(dst) {
		storePart(loadPart(x[n:]).MulAdd(sv, loadPart(dst[n:])), dst[n:])
	}
	archsimd.ClearAVXUpperBits()
}

// vtc is simd.Table.VtC on tiles of 4 rows of w by 2 vectors: per row of
// C, two loads and four broadcasts feed eight FMAs (an axpy per reflector
// entry fed one FMA from two loads and a store).
func vtc(w, v []float32, jb int, c []float32, ld, rows, cw int) {
	for p := 0; p < jb; p += 4 {
		for x := 0; x < cw; x += 2 * W {
			a0, a1, b0, b1 := zero(), zero(), zero(), zero()
			c0, c1, d0, d1 := zero(), zero(), zero(), zero()
			for r := range rows {
				x0, x1 := load(c, r*ld+x), load(c, r*ld+x+W)
				vp := r*jb + p
				va, vb, vc, vd := broadcastAt(v, vp), broadcastAt(v, vp+1), broadcastAt(v, vp+2), broadcastAt(v, vp+3)
				a0, a1 = x0.MulAdd(va, a0), x1.MulAdd(va, a1)
				b0, b1 = x0.MulAdd(vb, b0), x1.MulAdd(vb, b1)
				c0, c1 = x0.MulAdd(vc, c0), x1.MulAdd(vc, c1)
				d0, d1 = x0.MulAdd(vd, d0), x1.MulAdd(vd, d1)
			}
			o := p*cw + x
			store(a0, w, o)
			store(a1, w, o+W)
			store(b0, w, o+cw)
			store(b1, w, o+cw+W)
			store(c0, w, o+2*cw)
			store(c1, w, o+2*cw+W)
			store(d0, w, o+3*cw)
			store(d1, w, o+3*cw+W)
		}
	}
	archsimd.ClearAVXUpperBits()
}

// addVW is simd.Table.AddVW on tiles of 4 rows of C by 2 vectors, kept in
// registers over all of w's rows; the last rows % 4 one at a time.
func addVW(c []float32, ld, rows, cw int, v []float32, jb int, w []float32) {
	r := 0
	for ; r+4 <= rows; r += 4 {
		for x := 0; x < cw; x += 2 * W {
			i0, i1, i2, i3 := r*ld+x, (r+1)*ld+x, (r+2)*ld+x, (r+3)*ld+x
			a0, a1 := load(c, i0), load(c, i0+W)
			b0, b1 := load(c, i1), load(c, i1+W)
			c0, c1 := load(c, i2), load(c, i2+W)
			d0, d1 := load(c, i3), load(c, i3+W)
			for p := range jb {
				w0, w1 := load(w, p*cw+x), load(w, p*cw+x+W)
				vp := r*jb + p
				va, vb, vc, vd := broadcastAt(v, vp), broadcastAt(v, vp+jb), broadcastAt(v, vp+2*jb), broadcastAt(v, vp+3*jb)
				a0, a1 = w0.MulAdd(va, a0), w1.MulAdd(va, a1)
				b0, b1 = w0.MulAdd(vb, b0), w1.MulAdd(vb, b1)
				c0, c1 = w0.MulAdd(vc, c0), w1.MulAdd(vc, c1)
				d0, d1 = w0.MulAdd(vd, d0), w1.MulAdd(vd, d1)
			}
			store(a0, c, i0)
			store(a1, c, i0+W)
			store(b0, c, i1)
			store(b1, c, i1+W)
			store(c0, c, i2)
			store(c1, c, i2+W)
			store(d0, c, i3)
			store(d1, c, i3+W)
		}
	}
	for ; r < rows; r++ {
		for x := 0; x < cw; x += 2 * W {
			i := r*ld + x
			a0, a1 := load(c, i), load(c, i+W)
			for p := range jb {
				va := broadcastAt(v, r*jb+p)
				a0, a1 = load(w, p*cw+x).MulAdd(va, a0), load(w, p*cw+x+W).MulAdd(va, a1)
			}
			store(a0, c, i)
			store(a1, c, i+W)
		}
	}
	archsimd.ClearAVXUpperBits()
}

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

// adamW is simd.Portable.AdamW on W lanes (with a true division and square
// root: the step must match PyTorch's within rounding).
func adamW(h *simd.AdamW, p, g, m, v, vmax []float32) {
	sign, decay, b1, b2 := splat(h.Sign), splat(h.Decay), splat(h.OneMinusBeta1), splat(h.Beta2)
	nb2, lr, bc2, eps := splat(h.OneMinusBeta2), splat(h.StepSize), splat(h.BC2Sqrt), splat(h.Eps)
	g, m, v = g[:len(p)], m[:len(p)], v[:len(p)]
	step := func(pv, gv, mv, vv, xv vf) (vf, vf, vf, vf) {
		gv = gv.Mul(sign)
		mv = gv.Sub(mv).MulAdd(b1, mv)
		vv = vv.Mul(b2).Add(gv.Mul(nb2).Mul(gv))
		use := vv
		if vmax != nil {
			xv = xv.Max(vv)
			use = xv
		}
		denom := use.Sqrt().Div(bc2).Add(eps)
		return pv.Mul(decay).Sub(lr.Mul(mv).Div(denom)), mv, vv, xv
	}
	n := full(len(p))
	for i := 0; i < n; i += W {
		xv := zero()
		if vmax != nil {
			xv = load(vmax, i)
		}
		pv, mv, vv, xv := step(load(p, i), load(g, i), load(m, i), load(v, i), xv)
		store(pv, p, i)
		store(mv, m, i)
		store(vv, v, i)
		if vmax != nil {
			store(xv, vmax, i)
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
			w0 = load(row, 0).MulAdd(vi, w0)
			w1 = load(row, W).MulAdd(vi, w1)
			w2 = load(row, 2*W).MulAdd(vi, w2)
			w3 = load(row, 3*W).MulAdd(vi, w3)
		}
		for i := range rows {
			row, s := a[i*ld+c:], broadcastAt(v, i).Mul(nt)
			store(w0.MulAdd(s, load(row, 0)), row, 0)
			store(w1.MulAdd(s, load(row, W)), row, W)
			store(w2.MulAdd(s, load(row, 2*W)), row, 2*W)
			store(w3.MulAdd(s, load(row, 3*W)), row, 3*W)
		}
	}
	for ; c < n; c += W {
		var w0 vf
		for i := range rows {
			w0 = load(a, i*ld+c).MulAdd(broadcastAt(v, i), w0)
		}
		for i := range rows {
			row := a[i*ld+c:]
			store(w0.MulAdd(broadcastAt(v, i).Mul(nt), load(row, 0)), row, 0)
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
			store(zero(), w, c)
		} else {
			storePart(zero(), w[c:])
		}
	}
	for i := range rows {
		row, vi := a[i*ld:i*ld+cols], broadcastAt(v, i)
		c := 0
		for ; c < n; c += W {
			store(load(row, c).MulAdd(vi, load(w, c)), w, c)
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
			store(load(w, c).MulAdd(s, load(row, c)), row, c)
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
		alpha := load(a, j*rs+j*W)
		mx := asF(asI(alpha).And(absMask))
		for i := j + 1; i < m; i++ {
			mx = mx.Max(asF(asI(load(a, i*rs+j*W)).And(absMask)))
		}
		safe := one.Merge(mx, mx.Equal(zero())) // a zero column divides by 1
		// x / safe as (x * pre) * inv: pre = 2^64 lifts a denormal maximum
		// (its reciprocal would overflow) exactly into the normal range
		pre := splat(0x1p64).Merge(one, mx.Less(splat(0x1p-64)))
		inv := one.Div(safe.Mul(pre))
		var ss vf
		for i := j + 1; i < m; i++ {
			x := load(a, i*rs+j*W).Mul(pre).Mul(inv)
			ss = x.MulAdd(x, ss)
		}
		an := alpha.Mul(pre).Mul(inv)
		sign := asI(alpha).And(splatI(-0x80000000))
		bn := asF(asI(an.MulAdd(an, ss).Sqrt()).Or(sign)).Mul(splat(-1)) // -copysign(norm, alpha), scaled
		keep := ss.Equal(zero())                                         // nothing below the diagonal: H = I
		tau := zero().Merge(bn.Sub(an).Div(bn), keep)
		div := one.Div(an.Sub(bn)) // the tail x / (alpha - beta), as x * pre * inv * div
		store(alpha.Merge(bn.Mul(safe), keep), a, j*rs+j*W)
		for i := j + 1; i < m; i++ {
			x := load(a, i*rs+j*W)
			store(x.Merge(x.Mul(pre).Mul(inv).Mul(div), keep), a, i*rs+j*W)
		}
		store(tau, scratch, j*W)
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
				store(one, q, i*qs+c*W)
			} else {
				store(zero(), q, i*qs+c*W)
			}
		}
	}
	for j := k - 1; j >= 0; j-- {
		reflectLanes(q, qs, j, qCols, a, rs, j, m, load(scratch, j*W))
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
		w0, w1 := load(dst, j*ds+c*W), load(dst, j*ds+(c+1)*W)
		for i := j + 1; i < m; i++ {
			v := load(a, i*rs+j*W)
			w0 = v.MulAdd(load(dst, i*ds+c*W), w0)
			w1 = v.MulAdd(load(dst, i*ds+(c+1)*W), w1)
		}
		t0, t1 := tau.Mul(w0), tau.Mul(w1)
		store(load(dst, j*ds+c*W).Sub(t0), dst, j*ds+c*W)
		store(load(dst, j*ds+(c+1)*W).Sub(t1), dst, j*ds+(c+1)*W)
		for i := j + 1; i < m; i++ {
			v := load(a, i*rs+j*W)
			store(load(dst, i*ds+c*W).Sub(v.Mul(t0)), dst, i*ds+c*W)
			store(load(dst, i*ds+(c+1)*W).Sub(v.Mul(t1)), dst, i*ds+(c+1)*W)
		}
	}
	if c < to {
		w := load(dst, j*ds+c*W)
		for i := j + 1; i < m; i++ {
			w = load(a, i*rs+j*W).MulAdd(load(dst, i*ds+c*W), w)
		}
		tw := tau.Mul(w)
		store(load(dst, j*ds+c*W).Sub(tw), dst, j*ds+c*W)
		for i := j + 1; i < m; i++ {
			store(load(dst, i*ds+c*W).Sub(load(a, i*rs+j*W).Mul(tw)), dst, i*ds+c*W)
		}
	}
}
