package rope

// RefRope is one row's rotation (or, backward, its transpose) in float64.
func RefRope(x, cos, sin []float64, backward bool) []float64 {
	half := len(x) / 2
	y := make([]float64, len(x))
	for j := range half {
		x1, x2, c1, c2, s1, s2 := x[j], x[j+half], cos[j], cos[j+half], sin[j], sin[j+half]
		if backward {
			y[j], y[j+half] = x1*c1+x2*s2, x2*c2-x1*s1
		} else {
			y[j], y[j+half] = x1*c1-x2*s1, x2*c2+x1*s2
		}
	}
	return y
}
