package softmax

import "math"

// RefSoftmax is the float64 softmax of one row.
func RefSoftmax(x []float64) []float64 {
	m := math.Inf(-1)
	for _, v := range x {
		m = math.Max(m, v)
	}
	y := make([]float64, len(x))
	var s float64
	for i, v := range x {
		y[i] = math.Exp(v - m)
		s += y[i]
	}
	for i := range y {
		y[i] /= s
	}
	return y
}

// RefSoftmaxBwd is dx = y * (dy - sum(dy * y)) of one row.
func RefSoftmaxBwd(dy, y []float64) []float64 {
	var d float64
	for i := range y {
		d += dy[i] * y[i]
	}
	dx := make([]float64, len(y))
	for i := range y {
		dx[i] = y[i] * (dy[i] - d)
	}
	return dx
}
