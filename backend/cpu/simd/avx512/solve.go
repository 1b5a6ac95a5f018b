//go:build goexperiment.simd && amd64

package avx512

import (
	"math"
	"simd/archsimd"
)

// solveLanes is simd.Table.SolveLanes: every operation on W systems at
// once. A lane's pivot row is chosen per lane, so the row exchange is a
// merge under the mask of the lanes whose pivot is in that row: row j takes
// the pivot rows' values and each pivot row row j's old ones (kept in old);
// rows that are no lane's pivot are left alone. Then the rows below
// subtract their multiples of row j, in A and in B.
func solveLanes(a []float32, n int, b []float32, k int, old []float32, info []int32) {
	info = info[:W]
	clear(info)
	if n == 0 {
		return
	}
	ra, rb := n*W, k*W // one row of A and of B, interleaved
	_, _, _ = a[n*ra-1], b[:n*rb], old[:ra+rb]
	inf, absBits := splat(float32(math.Inf(1))), splatI(0x7fffffff)
	var best [W]float32
	for j := range n {
		// the pivot: per lane the first row of the largest magnitude
		top, at, row := splat(-1), splat(float32(j)), splat(float32(j))
		for i := j; i < n; i++ {
			v := asF(asI(load(a, i*ra+j*W)).And(absBits))
			v = inf.Merge(v, v.IsNaN())
			take := v.Greater(top)
			top, at = v.Merge(top, take), row.Merge(at, take)
			row = row.Add(splat(1))
		}
		top.Store(&best)
		archsimd.ClearAVXUpperBits()
		for l, v := range best {
			if v == 0 && info[l] == 0 {
				info[l] = int32(j + 1)
			}
		}
		aj, bj := a[j*ra+j*W:(j+1)*ra], b[j*rb:(j+1)*rb]
		oa, ob := old[:len(aj)], old[len(aj):len(aj)+rb]
		copy(oa, aj)
		copy(ob, bj)
		row = splat(float32(j))
		for i := j + 1; i < n; i++ {
			row = row.Add(splat(1))
			if here := at.Equal(row); here.ToBits() != 0 {
				exchange(aj, a[i*ra+j*W:(i+1)*ra], oa, here)
				exchange(bj, b[i*rb:(i+1)*rb], ob, here)
			}
		}
		inv := splat(1).Div(load(a, j*ra+j*W))
		for i := j + 1; i < n; i++ {
			f := load(a, i*ra+j*W).Mul(inv)
			subtract(a[i*ra+(j+1)*W:(i+1)*ra], aj[W:], f)
			subtract(b[i*rb:(i+1)*rb], bj, f)
		}
	}
	for i := n - 1; i >= 0; i-- {
		inv := splat(1).Div(load(a, i*ra+i*W))
		bi := b[i*rb : (i+1)*rb]
		for c := 0; c < len(bi); c += W {
			store(load(bi, c).Mul(inv), bi, c)
		}
		for r := range i {
			subtract(b[r*rb:(r+1)*rb], bi, load(a, r*ra+i*W))
		}
	}
	archsimd.ClearAVXUpperBits()
}

// exchange gives row j (rj) the lanes of row i (ri) that here selects, and
// row i those lanes of old (row j before).
func exchange(rj, ri, old []float32, here vm) {
	ri, old = ri[:len(rj)], old[:len(rj)]
	for c := 0; c < len(rj); c += W {
		x := load(ri, c)
		store(x.Merge(load(rj, c), here), rj, c)
		store(load(old, c).Merge(x, here), ri, c)
	}
}

// subtract is dst -= f * src, vector by vector (interleaved rows).
func subtract(dst, src []float32, f vf) {
	src = src[:len(dst)]
	f = zero().Sub(f)
	for c := 0; c < len(dst); c += W {
		store(f.MulAdd(load(src, c), load(dst, c)), dst, c)
	}
}
