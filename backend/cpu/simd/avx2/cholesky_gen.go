// Code generated from ../avx512/cholesky.go by go generate; DO NOT EDIT.

//go:build goexperiment.simd && amd64

package avx2

import "simd/archsimd"

// choleskyLanes is simd.Table.CholeskyLanes: column by column
// (Cholesky–Crout), every operation on W matrices at once; each entry a
// dot product of two rows' prefixes. A column's entries below the diagonal
// depend only on earlier columns, so their dot products overlap (row by
// row, each waited for the one before it), four rows at a time against one
// load of the diagonal's row (rowDots4).
func choleskyLanes(a []float32, n int, info []int32) {
	info = info[:W]
	clear(info)
	if n == 0 {
		return
	}
	rs := n * W // one matrix row, interleaved
	_ = a[n*rs-1]
	one := splat(1)
	var d [W]float32
	for j := range n {
		aj := a[j*rs:]
		s := load(aj, j*W).Sub(rowDot(aj, aj, j))
		s.Store(&d)
		archsimd.ClearAVXUpperBits()
		for l, v := range d {
			if !(v > 0) && info[l] == 0 { // not positive, or NaN
				info[l] = int32(j + 1)
			}
		}
		r := s.Sqrt()
		store(r, aj, j*W)
		inv := one.Div(r)
		i := j + 1
		for ; i+3 < n; i += 4 {
			a0, a1, a2, a3 := a[i*rs:], a[(i+1)*rs:], a[(i+2)*rs:], a[(i+3)*rs:]
			s0, s1, s2, s3 := rowDots4(a0, a1, a2, a3, aj, j)
			store(load(a0, j*W).Sub(s0).Mul(inv), a0, j*W)
			store(load(a1, j*W).Sub(s1).Mul(inv), a1, j*W)
			store(load(a2, j*W).Sub(s2).Mul(inv), a2, j*W)
			store(load(a3, j*W).Sub(s3).Mul(inv), a3, j*W)
		}
		for ; i < n; i++ {
			ai := a[i*rs:]
			store(load(ai, j*W).Sub(rowDot(ai, aj, j)).Mul(inv), ai, j*W)
		}
	}
	archsimd.ClearAVXUpperBits()
}

// rowDot is Σ_{k<m} x[kW:kW+W] * y[kW:kW+W], lane by lane, over four
// accumulators: two rows' prefixes here, two columns in svdLanes, a row
// and a column in qvLanes.
func rowDot(x, y []float32, m int) vf {
	var s0, s1, s2, s3 vf
	x, y = x[:m*W], y[:m*W]
	for len(x) >= 4*W {
		xb, yb := (*block4)(x), (*block4)(y)
		s0 = xb.at(0).MulAdd(yb.at(0), s0)
		s1 = xb.at(1).MulAdd(yb.at(1), s1)
		s2 = xb.at(2).MulAdd(yb.at(2), s2)
		s3 = xb.at(3).MulAdd(yb.at(3), s3)
		x, y = x[4*W:], y[4*W:]
	}
	for len(x) >= W {
		s0 = load(x, 0).MulAdd(load(y, 0), s0)
		x, y = x[W:], y[W:]
	}
	return s0.Add(s1).Add(s2.Add(s3))
}

// rowDots4 is rowDot of each of x0..x3 with y: four rows' products with
// one row, each of y's vectors loaded once for the four.
func rowDots4(x0, x1, x2, x3, y []float32, m int) (s0, s1, s2, s3 vf) {
	y = y[:m*W]
	x0, x1, x2, x3 = x0[:len(y)], x1[:len(y)], x2[:len(y)], x3[:len(y)]
	for k := 0; k+W <= len(y); k += W {
		yk := load(y, k)
		s0 = load(x0, k).MulAdd(yk, s0)
		s1 = load(x1, k).MulAdd(yk, s1)
		s2 = load(x2, k).MulAdd(yk, s2)
		s3 = load(x3, k).MulAdd(yk, s3)
	}
	return
}
