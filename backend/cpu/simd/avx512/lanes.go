//go:build goexperiment.simd && amd64

package avx512

import "simd/archsimd"

// interleave is simd.Table.Interleave: W elements of every matrix at a
// time, transposed into W interleaved elements (transposeRows); the last
// elems%W one at a time.
func interleave(a []float32, mats [][]float32, elems int) {
	m := (*[W][]float32)(mats)
	// declared outside the loop: Go zeroes them with SSE stores, slow
	// while vector registers' upper halves are in use
	var src, dst [W]*[W]float32
	var t [W]vf
	e := 0
	for ; e+W <= elems; e += W {
		for i := range W {
			src[i], dst[i] = (*[W]float32)(m[i][e:e+W]), (*[W]float32)(a[(e+i)*W:(e+i+1)*W])
		}
		transposeRows(&dst, &src, &t)
	}
	archsimd.ClearAVXUpperBits()
	for ; e < elems; e++ {
		for l := range W {
			a[e*W+l] = m[l][e]
		}
	}
}

// deinterleave is simd.Table.Deinterleave, interleave's inverse (the
// transposition is its own).
func deinterleave(mats [][]float32, a []float32, elems int) {
	m := (*[W][]float32)(mats)
	var src, dst [W]*[W]float32
	var t [W]vf
	e := 0
	for ; e+W <= elems; e += W {
		for i := range W {
			src[i], dst[i] = (*[W]float32)(a[(e+i)*W:(e+i+1)*W]), (*[W]float32)(m[i][e:e+W])
		}
		transposeRows(&dst, &src, &t)
	}
	archsimd.ClearAVXUpperBits()
	for ; e < elems; e++ {
		for l := range W {
			m[l][e] = a[e*W+l]
		}
	}
}
