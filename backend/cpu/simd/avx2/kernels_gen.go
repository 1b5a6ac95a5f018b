// Code generated from ../avx512/kernels.go by go generate; DO NOT EDIT.

//go:build goexperiment.simd && amd64

package avx2

import (
	"math"
	"simd/archsimd"

	"metalcore/backend/cpu/simd"
)

// This file and its siblings (one a family of primitives: reductions.go,
// rows.go, bf16rows.go, activations.go, adamw.go, qr.go, cholesky.go,
// conversions.go)
// are the width-independent template of the vector primitives: they name
// vectors only through vf/vi and the helpers of width.go. Loops run W lanes
// at a time (reductions 2W with two accumulators) and leave the tail to the
// portable code, which computes the same approximations. This file holds
// the table and what several families share (constants, exp and erf).

// Table is this ISA's implementation of every primitive.
var Table = simd.Table{
	Name: isaName,
	Reductions: simd.Reductions{
		SumSq: sumSq, Max: maxOf, Dot: dot, SumDot: sumDot, MulSumDot: mulSumDot, ShiftedSums: shiftedSums,
		ExpSum: expSum,
	},
	RowMath: simd.RowMath{
		Add: add, Mul: mul, Normalize: normalize, NormGrad: normGrad, SoftmaxGrad: softmaxGrad, FMAcc: fmAcc,
		AccMulSum: accMulSum,
	},
	BF16Rows: simd.BF16Rows{
		SumSq: sumSqBF16, AddSumSq: addSumSqBF16, ShiftedSums: shiftedSumsBF16, Normalize: normalizeBF16,
		GradDots: gradDotsBF16, GradAcc: gradAccBF16, NormGrad: normGradBF16,
	},
	Activations: simd.Activations{
		GeluErf: geluErf, GeluTanh: geluTanh, Silu: silu,
		GeluErfGrad: geluErfGrad, GeluTanhGrad: geluTanhGrad, SiluGrad: siluGrad,
	},
	AdamWStep: simd.AdamWStep{AdamW: adamW},
	QRKernels: simd.QRKernels{
		Axpy: axpy, Reflect: reflect, VtC: vtc, AddVW: addVW, PanelRows: panelRows, Lanes: W, QRLanes: qrLanes,
	},
	LaneMoves:       simd.LaneMoves{Interleave: interleave, Deinterleave: deinterleave},
	CholeskyKernels: simd.CholeskyKernels{CholeskyLanes: choleskyLanes},
	SolveKernels:    simd.SolveKernels{SolveLanes: solveLanes},
	EighKernels:     simd.EighKernels{EighLanes: eighLanes, Rot: rot, SymMV: symMV, SymRank2: symRank2},
	SVDKernels:      simd.SVDKernels{SVDLanes: svdLanes, QVLanes: qvLanes, JacobiRot: jacobiRot},
	Conversions: simd.Conversions{
		BF16ToF32: bf16ToF32, F16ToF32: f16ToF32, F32ToBF16: f32ToBF16, F32ToF16: f32ToF16,
	},
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
