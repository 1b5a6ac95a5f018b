package loss

import "math"

// RefCrossEntropy is the float64 loss of one row of logits x with target t
// and label smoothing s, and the gradient of that loss (times scale).
func RefCrossEntropy(x []float64, t int, s, scale float64) (float64, []float64) {
	var sum float64
	for _, v := range x {
		sum += v
	}
	lse, v := refLogSumExp(x), float64(len(x))
	loss := (1-s)*(lse-x[t]) + s*(lse-sum/v)
	grad := make([]float64, len(x))
	for j, xj := range x {
		grad[j] = scale * (math.Exp(xj-lse) - s/v)
	}
	grad[t] -= scale * (1 - s)
	return loss, grad
}

// refLogSumExp is log Σ exp(x), from the largest x.
func refLogSumExp(x []float64) float64 {
	m := math.Inf(-1)
	for _, v := range x {
		m = math.Max(m, v)
	}
	var e float64
	for _, v := range x {
		e += math.Exp(v - m)
	}
	return m + math.Log(e)
}
