//go:build goexperiment.simd && amd64

package avx512

import (
	"simd/archsimd"
)

// sigmoidOf is sigmoid(x) from e = exp(-x), exactly 0 below exp's clamp
// (where exp(-x) overflows float32), so that x*sigmoid(x) is -0 there and
// NaN at -inf, as PyTorch's x/(1 + exp(-x)); sigmoidPair also gives
// 1 - sigmoid(x) without cancellation.
func sigmoidOf(x, e vf) vf { return zero().Merge(recip(kOne.v().Add(e)), x.Less(kExpLo.v())) }

func sigmoidPair(x, e vf) (s, c vf) {
	s = sigmoidOf(x, e)
	return s, kOne.v().Sub(s).Merge(e.Mul(s), x.Less(zero()))
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
