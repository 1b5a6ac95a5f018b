package solve

import "math"

// RefSolve is the float64 solution X (n x k, row-major) of A X = B for the
// n x n matrix a and the n x k b, by Gaussian elimination with partial
// pivoting, and LAPACK's info: 0, or j where the j-th pivot is zero (X then
// nil).
func RefSolve(a, b []float64, n, k int) ([]float64, int) {
	m := n + k
	w := make([]float64, n*m)
	for i := range n {
		copy(w[i*m:], a[i*n:(i+1)*n])
		copy(w[i*m+n:], b[i*k:(i+1)*k])
	}
	for j := range n {
		p := j
		for i := j + 1; i < n; i++ {
			if math.Abs(w[i*m+j]) > math.Abs(w[p*m+j]) {
				p = i
			}
		}
		if w[p*m+j] == 0 {
			return nil, j + 1
		}
		for c := range m {
			w[j*m+c], w[p*m+c] = w[p*m+c], w[j*m+c]
		}
		for i := j + 1; i < n; i++ {
			f := w[i*m+j] / w[j*m+j]
			for c := j; c < m; c++ {
				w[i*m+c] -= f * w[j*m+c]
			}
		}
	}
	x := make([]float64, n*k)
	for i := n - 1; i >= 0; i-- {
		for c := range k {
			s := w[i*m+n+c]
			for r := i + 1; r < n; r++ {
				s -= w[i*m+r] * x[r*k+c]
			}
			x[i*k+c] = s / w[i*m+i]
		}
	}
	return x, 0
}
