// Code generated from ../avx512/cholesky.go by go generate; DO NOT EDIT.

//go:build goexperiment.simd && amd64

package avx2

import "simd/archsimd"

// choleskyLanes is simd.Table.CholeskyLanes: row by row
// (Cholesky–Banachiewicz), every operation on W matrices at once; each
// entry below the diagonal a dot product of two rows' prefixes over two
// accumulators, times the stored reciprocal of its column's diagonal.
func choleskyLanes(a []float32, n int, invDiag []float32, info []int32) {
	info = info[:W]
	clear(info)
	if n == 0 {
		return
	}
	rs := n * W // one matrix row, interleaved
	_, _ = a[n*rs-1], invDiag[n*W-1]
	one := splat(1)
	var d [W]float32
	for i := range n {
		for j := 0; j <= i; j++ {
			s := rowDot(a[i*rs:], a[j*rs:], j)
			s = load(a, i*rs+j*W).Sub(s)
			if j < i {
				store(s.Mul(load(invDiag, j*W)), a, i*rs+j*W)
				continue
			}
			s.Store(&d)
			archsimd.ClearAVXUpperBits()
			for l, v := range d {
				if !(v > 0) && info[l] == 0 { // not positive, or NaN
					info[l] = int32(i + 1)
				}
			}
			r := s.Sqrt()
			store(r, a, i*rs+i*W)
			store(one.Div(r), invDiag, i*W)
		}
	}
	archsimd.ClearAVXUpperBits()
}

// rowDot is Σ_{k<m} x[kW:kW+W] * y[kW:kW+W], lane by lane, over four
// accumulators.
func rowDot(x, y []float32, m int) vf {
	var s0, s1, s2, s3 vf
	k := 0
	for ; k+3 < m; k += 4 {
		s0 = load(x, k*W).MulAdd(load(y, k*W), s0)
		s1 = load(x, (k+1)*W).MulAdd(load(y, (k+1)*W), s1)
		s2 = load(x, (k+2)*W).MulAdd(load(y, (k+2)*W), s2)
		s3 = load(x, (k+3)*W).MulAdd(load(y, (k+3)*W), s3)
	}
	for ; k < m; k++ {
		s0 = load(x, k*W).MulAdd(load(y, k*W), s0)
	}
	return s0.Add(s1).Add(s2.Add(s3))
}
