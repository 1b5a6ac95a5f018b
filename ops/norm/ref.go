package norm

import "math"

// Float64 references, one row at a time; the tests compare the kernels
// against them. w and b may be nil.

// RefRMSNorm returns y and rstd of one row.
func RefRMSNorm(x, w []float64, eps float64) ([]float64, float64) {
	var ss float64
	for _, v := range x {
		ss += v * v
	}
	r := 1 / math.Sqrt(ss/float64(len(x))+eps)
	return refNormalize(x, w, nil, 0, r), r
}

// RefLayerNorm returns y, mean and rstd of one row.
func RefLayerNorm(x, w, b []float64, eps float64) ([]float64, float64, float64) {
	var m, v float64
	for _, e := range x {
		m += e
	}
	m /= float64(len(x))
	for _, e := range x {
		v += (e - m) * (e - m)
	}
	r := 1 / math.Sqrt(v/float64(len(x))+eps)
	return refNormalize(x, w, b, m, r), m, r
}

func refNormalize(x, w, b []float64, mean, rstd float64) []float64 {
	y := make([]float64, len(x))
	for i := range x {
		y[i] = (x[i] - mean) * rstd
		if w != nil {
			y[i] *= w[i]
		}
		if b != nil {
			y[i] += b[i]
		}
	}
	return y
}

// RefRMSNormBwd returns dx of one row and adds the row's dweight terms to
// dw (when dw is not nil).
func RefRMSNormBwd(dy, x, w []float64, rstd float64, dw []float64) []float64 {
	g := refGradOut(dy, w)
	var dot float64
	for i := range x {
		dot += g[i] * x[i]
		if dw != nil {
			dw[i] += dy[i] * x[i] * rstd
		}
	}
	c := dot * rstd * rstd / float64(len(x))
	dx := make([]float64, len(x))
	for i := range x {
		dx[i] = rstd * (g[i] - c*x[i])
	}
	return dx
}

// RefLayerNormBwd returns dx of one row and adds its terms to dw and db
// (each may be nil).
func RefLayerNormBwd(dy, x, w []float64, mean, rstd float64, dw, db []float64) []float64 {
	g := refGradOut(dy, w)
	n := float64(len(x))
	xhat := refNormalize(x, nil, nil, mean, rstd)
	var sg, sgx float64
	for i := range x {
		sg += g[i]
		sgx += g[i] * xhat[i]
		if dw != nil {
			dw[i] += dy[i] * xhat[i]
		}
		if db != nil {
			db[i] += dy[i]
		}
	}
	dx := make([]float64, len(x))
	for i := range x {
		dx[i] = rstd * (g[i] - sg/n - xhat[i]*sgx/n)
	}
	return dx
}

func refGradOut(dy, w []float64) []float64 {
	if w == nil {
		return dy
	}
	g := make([]float64, len(dy))
	for i := range dy {
		g[i] = dy[i] * w[i]
	}
	return g
}
