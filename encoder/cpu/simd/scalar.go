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

	// Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7), as PyTorch's vectorized erf.
	ErfP  = 0.3275911
	ErfA1 = 0.254829592
	ErfA2 = -0.284496736
	ErfA3 = 1.421413741
	ErfA4 = -1.453152027
	ErfA5 = 1.061405429

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

// Erf32 is erf with the A&S 7.1.26 approximation.
func Erf32(x float32) float32 {
	ax := float32(math.Abs(float64(x)))
	t := 1 / (1 + ErfP*ax)
	p := float32(ErfA5)
	p = p*t + ErfA4
	p = p*t + ErfA3
	p = p*t + ErfA2
	p = p*t + ErfA1
	y := 1 - p*t*Exp32(-ax*ax)
	return float32(math.Copysign(float64(y), float64(x)))
}

// Sigmoid32 is 1 / (1 + exp(-x)).
func Sigmoid32(x float32) float32 { return 1 / (1 + Exp32(-x)) }

func GeluErf32(x float32) float32 { return 0.5 * x * (1 + Erf32(x*Sqrt1_2)) }

func GeluErfGrad32(dy, x float32) float32 {
	cdf := 0.5 * (1 + Erf32(x*Sqrt1_2))
	return dy * (cdf + x*InvSqrt2Pi*Exp32(-0.5*x*x))
}

// geluTanhSigmoid is sigmoid(2u), u = sqrt(2/pi)(x + 0.044715x^3), since
// 0.5(1 + tanh(u)) = sigmoid(2u) without the cancellation of 1 + tanh.
func geluTanhSigmoid(x float32) (s, du float32) {
	x2 := x * x
	u := GeluTanhK * x * (1 + GeluTanhC*x2)
	return Sigmoid32(2 * u), GeluTanhK * (1 + 3*GeluTanhC*x2)
}

func GeluTanh32(x float32) float32 {
	s, _ := geluTanhSigmoid(x)
	return x * s
}

// GeluTanhGrad32: d/dx x*s(2u) = s + 2x s (1-s) du/dx.
func GeluTanhGrad32(dy, x float32) float32 {
	s, du := geluTanhSigmoid(x)
	return dy * (s + 2*x*s*(1-s)*du)
}

func Silu32(x float32) float32 { return x * Sigmoid32(x) }

func SiluGrad32(dy, x float32) float32 {
	s := Sigmoid32(x)
	return dy * s * (1 + x*(1-s))
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
	case a >= 0x47800000: // too big for half: inf, or NaN stays NaN
		o = 0x7c00
		if a > 0x7f800000 {
			o = 0x7e00
		}
	case a < 0x38800000: // half subnormal or zero: let the FPU round
		o = math.Float32bits(math.Float32frombits(a)+0.5) - 0x3f000000
	default:
		o = (a - 0x38000000 + 0xfff + (a>>13)&1) >> 13
	}
	return uint16(o) | sign
}
