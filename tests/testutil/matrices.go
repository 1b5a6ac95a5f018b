package testutil

import (
	"math"
	"math/rand/v2"
)

// Orthonormal is a random rows x cols matrix (row-major, cols <= rows) with
// orthonormal columns: Gram-Schmidt, twice, on N(0, 1) entries, in float64.
func Orthonormal(rng *rand.Rand, rows, cols int) []float64 {
	q := make([]float64, rows*cols)
	for i := range q {
		q[i] = rng.NormFloat64()
	}
	for j := range cols {
		for range 2 {
			for i := range j {
				d := 0.0
				for r := range rows {
					d += q[r*cols+i] * q[r*cols+j]
				}
				for r := range rows {
					q[r*cols+j] -= d * q[r*cols+i]
				}
			}
		}
		norm := 0.0
		for r := range rows {
			norm += q[r*cols+j] * q[r*cols+j]
		}
		for r := range rows {
			q[r*cols+j] /= math.Sqrt(norm)
		}
	}
	return q
}

// WithSpectrum is P diag(d) Qᵀ (m x n, row-major) for P [m, k] and Q
// [n, k] (row-major): a matrix of singular values (or, with Q = P,
// eigenvalues) d(0), ..., d(k-1).
func WithSpectrum(p []float64, m int, q []float64, n, k int, d func(i int) float64) []float64 {
	a := make([]float64, m*n)
	for i := range m {
		for j := range n {
			for l := range k {
				a[i*n+j] += p[i*k+l] * d(l) * q[j*k+l]
			}
		}
	}
	return a
}
