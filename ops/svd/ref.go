package svd

import (
	"math"
	"sort"
)

// RefSVD is the float64 singular values of the m x n matrix a (row-major),
// in descending order, by one-sided Jacobi rotations of its columns (its
// rows' for a wide a) to float64 rounding.
func RefSVD(a []float64, m, n int) []float64 {
	rows, cols := max(m, n), min(m, n)
	b := make([]float64, rows*cols) // column j at b[j*rows:]
	for i := range m {
		for j := range n {
			if m >= n {
				b[j*rows+i] = a[i*n+j]
			} else {
				b[i*rows+j] = a[i*n+j]
			}
		}
	}
	dot := func(p, q int) (s float64) {
		for i := range rows {
			s += b[p*rows+i] * b[q*rows+i]
		}
		return
	}
	for range 100 {
		rotated := false
		for p := range cols {
			for q := p + 1; q < cols; q++ {
				alpha, beta, gamma := dot(p, p), dot(q, q), dot(p, q)
				if !(math.Abs(gamma) > 1e-15*math.Sqrt(alpha*beta)) {
					continue
				}
				zeta := (beta - alpha) / (2 * gamma)
				t := math.Copysign(1/(math.Abs(zeta)+math.Sqrt(1+zeta*zeta)), zeta)
				if t == 0 || math.IsNaN(t) {
					continue
				}
				rotated = true
				c := 1 / math.Sqrt(1+t*t)
				s := c * t
				for i := range rows {
					x, y := b[p*rows+i], b[q*rows+i]
					b[p*rows+i], b[q*rows+i] = c*x-s*y, s*x+c*y
				}
			}
		}
		if !rotated {
			break
		}
	}
	sv := make([]float64, cols)
	for j := range cols {
		sv[j] = math.Sqrt(dot(j, j))
	}
	sort.Sort(sort.Reverse(sort.Float64Slice(sv)))
	return sv
}
