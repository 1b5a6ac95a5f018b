package cholesky

import "math"

// RefCholesky is the float64 lower factor of the n x n matrix a (row-major,
// its lower triangle read), and LAPACK's info: 0, or k where the leading
// minor of order k is not positive-definite (the factor then holds the
// first k - 1 columns).
func RefCholesky(a []float64, n int) ([]float64, int) {
	l := make([]float64, n*n)
	for j := range n {
		d := a[j*n+j]
		for k := range j {
			d -= l[j*n+k] * l[j*n+k]
		}
		if !(d > 0) {
			return l, j + 1
		}
		l[j*n+j] = math.Sqrt(d)
		for i := j + 1; i < n; i++ {
			s := a[i*n+j]
			for k := range j {
				s -= l[i*n+k] * l[j*n+k]
			}
			l[i*n+j] = s / l[j*n+j]
		}
	}
	return l, 0
}
