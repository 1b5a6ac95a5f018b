package simd

import "math"

// Constants shared by the scalar and vector forms of the math functions, so
// every implementation computes the same approximation.
const (
	ExpLo    = -88.0
	ExpHi    = 88.0
	Log2E    = 1.44269504088896341
	Ln2Hi    = 0.693359375
	Ln2Lo    = -2.12194440e-4
	RoundMag = 12582912.0 // 1.5 * 2^23: adding it rounds to an integer
	ExpP0    = 1.9875691500e-4
	ExpP1    = 1.3981999507e-3
	ExpP2    = 8.3334519073e-3
	ExpP3    = 4.1665795894e-2
	ExpP4    = 1.6666665459e-1
	ExpP5    = 5.0000001201e-1

	// erf on [-4, 4] as x*P(x^2)/Q(x^2) (Eigen's generic_fast_erf_float;
	// |error| < 7e-8 in exact arithmetic); outside it erf is +-1 in float32.
	ErfClamp = 4.0
	ErfP13   = -2.72614225801306e-10
	ErfP11   = 2.77068142495902e-08
	ErfP9    = -2.10102402082508e-06
	ErfP7    = -5.69250639462346e-05
	ErfP5    = -7.34990630326855e-04
	ErfP3    = -2.95459980854025e-03
	ErfP1    = -1.60960333262415e-02
	ErfQ8    = -1.45660718464996e-05
	ErfQ6    = -2.13374055278905e-04
	ErfQ4    = -1.68282697438203e-03
	ErfQ2    = -7.37332916720468e-03
	ErfQ0    = -1.42647390514189e-02

	Sqrt1_2    = 0.70710678118654752
	InvSqrt2Pi = 0.39894228040143268 // 1/sqrt(2*pi)
	GeluTanhK  = 0.79788456080286536 // sqrt(2/pi)
	GeluTanhC  = 0.044715
)

// Exp32 is the float32 exp of the vector kernels (Cephes expf): inputs are
// clamped to [-88, 88], below which it returns 0.
func Exp32(x float32) float32 {
	if x != x {
		return x
	}
	x = min(max(x, ExpLo), ExpHi)
	t := x*Log2E + RoundMag
	n := t - RoundMag
	r := x - n*Ln2Hi
	r = r - n*Ln2Lo
	p := float32(ExpP0)
	p = p*r + ExpP1
	p = p*r + ExpP2
	p = p*r + ExpP3
	p = p*r + ExpP4
	p = p*r + ExpP5
	p = p*(r*r) + r + 1
	e := math.Float32frombits(uint32(int32(n)+127) << 23)
	return p * e
}

// Erf32 is erf as the rational approximation of the vector kernels.
func Erf32(x float32) float32 {
	if x != x {
		return x
	}
	x = min(max(x, -ErfClamp), ErfClamp)
	x2 := x * x
	p := float32(ErfP13)
	p = p*x2 + ErfP11
	p = p*x2 + ErfP9
	p = p*x2 + ErfP7
	p = p*x2 + ErfP5
	p = p*x2 + ErfP3
	p = p*x2 + ErfP1
	q := float32(ErfQ8)
	q = q*x2 + ErfQ6
	q = q*x2 + ErfQ4
	q = q*x2 + ErfQ2
	q = q*x2 + ErfQ0
	return x * p / q
}

// Sigmoid32 is 1 / (1 + exp(-x)), exactly 0 below exp's clamp (where
// exp(-x) overflows float32): x*sigmoid(x) is then -0, and NaN at -inf, as
// PyTorch's x/(1 + exp(-x)).
func Sigmoid32(x float32) float32 {
	s, _ := sigmoidPair(x)
	return s
}

// sigmoidPair is sigmoid(x) and 1 - sigmoid(x), the latter as e/(1+e) for
// x >= 0, where 1 - s would cancel (the gradients multiply it by large x).
func sigmoidPair(x float32) (s, c float32) {
	if x < ExpLo {
		return 0, 1
	}
	e := Exp32(-x)
	s = 1 / (1 + e)
	if x < 0 {
		return s, 1 - s
	}
	return s, e * s
}

func GeluErf32(x float32) float32 { return 0.5 * x * (1 + Erf32(x*Sqrt1_2)) }

func GeluErfGrad32(dy, x float32) float32 {
	cdf := 0.5 * (1 + Erf32(x*Sqrt1_2))
	return dy * (cdf + x*InvSqrt2Pi*Exp32(-0.5*x*x))
}

// geluTanhSigmoid is sigmoid(2u) and its complement, u = sqrt(2/pi)(x +
// 0.044715x^3), since 0.5(1 + tanh(u)) = sigmoid(2u) without the
// cancellation of 1 + tanh; and du/dx.
func geluTanhSigmoid(x float32) (s, c, du float32) {
	x2 := x * x
	u := GeluTanhK * x * (1 + GeluTanhC*x2)
	s, c = sigmoidPair(2 * u)
	return s, c, GeluTanhK * (1 + 3*GeluTanhC*x2)
}

func GeluTanh32(x float32) float32 {
	s, _, _ := geluTanhSigmoid(x)
	return x * s
}

// GeluTanhGrad32: d/dx x*s(2u) = s + 2x s (1-s) du/dx.
func GeluTanhGrad32(dy, x float32) float32 {
	s, c, du := geluTanhSigmoid(x)
	return dy * (s + 2*x*s*c*du)
}

func Silu32(x float32) float32 { return x * Sigmoid32(x) }

func SiluGrad32(dy, x float32) float32 {
	s, c := sigmoidPair(x)
	return dy * s * (1 + x*c)
}

// BF16 and F16 conversions, one value at a time.

func BF16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

func F32ToBF16(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 0x40 // quiet the NaN, keep sign and payload top
	}
	return uint16((u + 0x7fff + (u>>16)&1) >> 16)
}

func F16ToF32(h uint16) float32 {
	em := uint32(h&0x7fff) << 13
	f := math.Float32frombits(em) * 0x1p112 // rebias exponent, handles subnormals
	if em >= 0x7c00<<13 {
		f = math.Float32frombits(em | 0x7f800000)
	}
	return math.Float32frombits(math.Float32bits(f) | uint32(h&0x8000)<<16)
}

// F32ToF16 rounds to nearest even (after F. Giesen's float_to_half_fast3_rtne).
func F32ToF16(f float32) uint16 {
	u := math.Float32bits(f)
	sign := uint16(u>>16) & 0x8000
	a := u & 0x7fffffff
	var o uint32
	switch {
	case a > 0x7f800000: // NaN: quieted, top of the payload kept (as VCVTPS2PH)
		o = 0x7e00 | (a>>13)&0x3ff
	case a >= 0x47800000: // too big for half: infinity
		o = 0x7c00
	case a < 0x38800000: // half subnormal or zero: let the FPU round
		o = math.Float32bits(math.Float32frombits(a)+0.5) - 0x3f000000
	default:
		o = (a - 0x38000000 + 0xfff + (a>>13)&1) >> 13
	}
	return uint16(o) | sign
}
