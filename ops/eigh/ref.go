package eigh

import (
	"math"
	"sort"
)

// RefEigh is the float64 eigendecomposition of the symmetric n x n matrix
// a (row-major, its lower triangle read): the eigenvalues in ascending
// order and the orthonormal eigenvectors as the columns of a row-major
// n x n matrix, by cyclic Jacobi rotations to float64 rounding.
func RefEigh(a []float64, n int) ([]float64, []float64) {
	m := make([]float64, n*n)
	v := make([]float64, n*n)
	for i := range n {
		for j := range i + 1 {
			m[i*n+j], m[j*n+i] = a[i*n+j], a[i*n+j]
		}
		v[i*n+i] = 1
	}
	for range 100 {
		off := 0.0
		for i := range n {
			for j := range i {
				off += m[i*n+j] * m[i*n+j]
			}
		}
		if off == 0 || math.IsNaN(off) {
			break
		}
		for p := range n {
			for q := p + 1; q < n; q++ {
				if m[p*n+q] == 0 {
					continue
				}
				theta := (m[q*n+q] - m[p*n+p]) / (2 * m[p*n+q])
				t := 1 / (math.Abs(theta) + math.Sqrt(theta*theta+1))
				if theta < 0 {
					t = -t
				}
				if math.IsInf(theta, 0) {
					t = 0
				}
				c := 1 / math.Sqrt(t*t+1)
				s := t * c
				for r := range n { // A J
					x, y := m[r*n+p], m[r*n+q]
					m[r*n+p], m[r*n+q] = c*x-s*y, s*x+c*y
					x, y = v[r*n+p], v[r*n+q]
					v[r*n+p], v[r*n+q] = c*x-s*y, s*x+c*y
				}
				for r := range n { // Jᵀ A
					x, y := m[p*n+r], m[q*n+r]
					m[p*n+r], m[q*n+r] = c*x-s*y, s*x+c*y
				}
				m[p*n+q], m[q*n+p] = 0, 0
			}
		}
	}
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(i, j int) bool { return m[order[i]*n+order[i]] < m[order[j]*n+order[j]] })
	w := make([]float64, n)
	vs := make([]float64, n*n)
	for k, i := range order {
		w[k] = m[i*n+i]
		for r := range n {
			vs[r*n+k] = v[r*n+i]
		}
	}
	return w, vs
}
