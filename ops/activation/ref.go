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
