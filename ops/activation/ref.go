package activation

import "math"

// Float64 references of the activations and their derivatives.

func RefGelu(x float64, approximate int32) float64 {
	if approximate == GeluTanh {
		return 0.5 * x * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(x+0.044715*x*x*x)))
	}
	return 0.5 * x * (1 + math.Erf(x/math.Sqrt2))
}

func RefGeluGrad(dy, x float64, approximate int32) float64 {
	if approximate == GeluTanh {
		k := math.Sqrt(2 / math.Pi)
		t := math.Tanh(k * (x + 0.044715*x*x*x))
		return dy * (0.5*(1+t) + 0.5*x*(1-t*t)*k*(1+3*0.044715*x*x))
	}
	return dy * (0.5*(1+math.Erf(x/math.Sqrt2)) + x*math.Exp(-x*x/2)/math.Sqrt(2*math.Pi))
}

func RefSilu(x float64) float64 { return x / (1 + math.Exp(-x)) }

func RefSiluGrad(dy, x float64) float64 {
	s := 1 / (1 + math.Exp(-x))
	return dy * s * (1 + x*(1-s))
}

// PyTorch's float32 formulas (its CPU kernels' expressions, each product
// rounded to float32), the reference for extreme inputs: where float32
// overflows, PyTorch returns what these return (often NaN or -0), which a
// float64 evaluation would not show.

func TorchGelu32(x float32, approximate int32) float32 {
	if approximate == GeluTanh {
		const beta, kappa = float32(math.Sqrt2 * 2 / math.SqrtPi * 0.5), float32(0.044715)
		cube := x * x * x
		inner := beta * (x + kappa*cube)
		return float32(0.5*x) * (1 + float32(math.Tanh(float64(inner))))
	}
	return float32(x*0.5) * (1 + float32(math.Erf(float64(x*math.Sqrt2/2))))
}

func TorchGeluGrad32(dy, x float32, approximate int32) float32 {
	if approximate == GeluTanh {
		const beta, kappa = float32(math.Sqrt2 * 2 / math.SqrtPi * 0.5), float32(0.044715)
		sq := x * x
		cube := sq * x
		inner := beta * (x + kappa*cube)
		th := float32(math.Tanh(float64(inner)))
		left, right := 0.5*x, 1+th
		leftD := 0.5 * right
		tanhD := 1 - th*th
		innerD := beta * (1 + 3*kappa*sq)
		rightD := float32(left*tanhD) * innerD
		return dy * (leftD + rightD)
	}
	const alpha, beta = float32(math.Sqrt2 / 2), float32(2 / math.SqrtPi * math.Sqrt2 / 2 * 0.5)
	cdf := 0.5 * (1 + float32(math.Erf(float64(x*alpha))))
	pdf := beta * float32(math.Exp(float64(float32(x*x)*-0.5)))
	return dy * (cdf + x*pdf)
}

func TorchSilu32(x float32) float32 { return x / (1 + float32(math.Exp(float64(-x)))) }

func TorchSiluGrad32(dy, x float32) float32 {
	s := 1 / (1 + float32(math.Exp(float64(-x))))
	return float32(dy*s) * (1 + x*(1-s))
}
