// Code generated from ../avx512/lanes.go by go generate; DO NOT EDIT.

//go:build goexperiment.simd && amd64

package avx2

import "simd/archsimd"

// interleave is simd.Table.Interleave.
func interleave(a []float32, mats [][]float32, elems int) { moveLanes(a, mats, elems, true) }

// deinterleave is simd.Table.Deinterleave.
func deinterleave(mats [][]float32, a []float32, elems int) { moveLanes(a, mats, elems, false) }

// moveLanes copies W matrices into their interleaved form a (in), or out
// of it: W elements of every matrix at a time are W interleaved elements
// transposed (transposeRows, its own inverse); the last elems%W one at a
// time.
func moveLanes(a []float32, mats [][]float32, elems int, in bool) {
	m := (*[W][]float32)(mats)
	// declared outside the loop: Go zeroes an array at its declaration
	// (16-byte stores; a vector array's next 64-byte loads waited on them)
	var rows, lanes [W]*[W]float32 // W elements of each matrix; W interleaved elements
	var t [W]vf
	e := 0
	for ; e+W <= elems; e += W {
		for i := range W {
			rows[i], lanes[i] = (*[W]float32)(m[i][e:e+W]), (*[W]float32)(a[(e+i)*W:(e+i+1)*W])
		}
		if in {
			transposeRows(&lanes, &rows, &t)
		} else {
			transposeRows(&rows, &lanes, &t)
		}
	}
	archsimd.ClearAVXUpperBits()
	for ; e < elems; e++ {
		for l := range W {
			if in {
				a[e*W+l] = m[l][e]
			} else {
				m[l][e] = a[e*W+l]
			}
		}
	}
}
