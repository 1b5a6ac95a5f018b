// Code generated from ../avx512/lanes.go by go generate; DO NOT EDIT.

//go:build goexperiment.simd && amd64

package avx2

import "simd/archsimd"

// interleave is simd.Table.Interleave.
func interleave(a []float32, mats [][]float32, elems int) { moveLanes(a, mats, elems, true) }

// deinterleave is simd.Table.Deinterleave.
func deinterleave(mats [][]float32, a []float32, elems int) { moveLanes(a, mats, elems, false) }

// moveLanes copies W matrices into their interleaved form a (in), or out
// of it, eight matrices at a time: 8 elements of each of eight matrices
// are an 8 x 8 block transposed in 256-bit registers (transpose8, its own
// inverse); the last elems%8 one at a time. Eight matrices' streams stay in
// L1 where sixteen did not: matrices 4 KiB apart (32 x 32 float32) share
// one L1 set, and with sixteen rows of a block in it the next rows fetched
// were evicted before their turn (PITFALLS.md).
func moveLanes(a []float32, mats [][]float32, elems int, in bool) {
	full := elems &^ 7
	for h := 0; h < W; h += 8 {
		m := (*[8][]float32)(mats[h : h+8])
		for e := 0; e < full; e += 8 {
			// row i of the block: 8 elements of matrix h+i, or element e+i's
			// lanes h..h+7
			mat := func(i int) *[8]float32 { return (*[8]float32)(m[i][e : e+8]) }
			lane := func(i int) *[8]float32 { return (*[8]float32)(a[(e+i)*W+h : (e+i)*W+h+8]) }
			if in {
				x0, x1, x2, x3, x4, x5, x6, x7 := transpose8(ld8(mat(0)), ld8(mat(1)), ld8(mat(2)), ld8(mat(3)),
					ld8(mat(4)), ld8(mat(5)), ld8(mat(6)), ld8(mat(7)))
				x0.Store(lane(0))
				x1.Store(lane(1))
				x2.Store(lane(2))
				x3.Store(lane(3))
				x4.Store(lane(4))
				x5.Store(lane(5))
				x6.Store(lane(6))
				x7.Store(lane(7))
			} else {
				x0, x1, x2, x3, x4, x5, x6, x7 := transpose8(ld8(lane(0)), ld8(lane(1)), ld8(lane(2)), ld8(lane(3)),
					ld8(lane(4)), ld8(lane(5)), ld8(lane(6)), ld8(lane(7)))
				x0.Store(mat(0))
				x1.Store(mat(1))
				x2.Store(mat(2))
				x3.Store(mat(3))
				x4.Store(mat(4))
				x5.Store(mat(5))
				x6.Store(mat(6))
				x7.Store(mat(7))
			}
		}
	}
	archsimd.ClearAVXUpperBits()
	for e := full; e < elems; e++ {
		for l := range W {
			if in {
				a[e*W+l] = mats[l][e]
			} else {
				mats[l][e] = a[e*W+l]
			}
		}
	}
}

type v8 = archsimd.Float32x8

func ld8(p *[8]float32) v8 { return archsimd.LoadFloat32x8(p) }

// transpose8 is the transpose of the 8 x 8 block of rows x0..x7, in
// registers: three stages, stage k swapping bit k of the row index with
// bit k of the column index, within 128-bit halves by VSHUFPS for bits 0
// and 1 (swapQuad8), across them by VPERM2F128 for bit 2.
func transpose8(x0, x1, x2, x3, x4, x5, x6, x7 v8) (v8, v8, v8, v8, v8, v8, v8, v8) {
	x0, x1, x2, x3 = swapQuad8(x0, x1, x2, x3)
	x4, x5, x6, x7 = swapQuad8(x4, x5, x6, x7)
	return x0.Select128FromPair(0, 2, x4), x1.Select128FromPair(0, 2, x5), x2.Select128FromPair(0, 2, x6),
		x3.Select128FromPair(0, 2, x7), x0.Select128FromPair(1, 3, x4), x1.Select128FromPair(1, 3, x5),
		x2.Select128FromPair(1, 3, x6), x3.Select128FromPair(1, 3, x7)
}

// swapQuad8 is the stages of bits 0 and 1 over rows x0..x3.
func swapQuad8(x0, x1, x2, x3 v8) (v8, v8, v8, v8) {
	x0, x1 = x0.SelectFromPairGrouped(0, 4, 2, 6, x1), x0.SelectFromPairGrouped(1, 5, 3, 7, x1)
	x2, x3 = x2.SelectFromPairGrouped(0, 4, 2, 6, x3), x2.SelectFromPairGrouped(1, 5, 3, 7, x3)
	x0, x2 = x0.SelectFromPairGrouped(0, 1, 4, 5, x2), x0.SelectFromPairGrouped(2, 3, 6, 7, x2)
	x1, x3 = x1.SelectFromPairGrouped(0, 1, 4, 5, x3), x1.SelectFromPairGrouped(2, 3, 6, 7, x3)
	return x0, x1, x2, x3
}
