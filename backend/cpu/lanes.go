package cpu

// Batches of small matrices computed a vector's width at a time keep them
// interleaved: element e of matrix l at a[e*lanes+l], so that one vector
// holds the same element of every matrix.

// MaxLanes is the widest vector's float32 lanes (AVX-512); laneBlock is
// how many elements (times the lanes) Interleave and Deinterleave move at a
// time, so that the interleaved block being filled or read stays in L1.
const (
	MaxLanes  = 16
	laneBlock = 64
)

// Eye sets buf to the first cols columns of the m x m identity, row-major
// with row stride ld (zeros past cols), and returns it: Q's start, and the
// matrix that pads a batch's last group of lanes.
func Eye(buf []float32, m, cols, ld int) []float32 {
	clear(buf)
	for i := range min(m, cols) {
		buf[i*ld+i] = 1
	}
	return buf
}

// Interleave sets a[e*len(mats)+l] = mats[l][e] for e < elems: by the
// ISA's block transposition for its own width.
func Interleave(a []float32, mats [][]float32, elems int) {
	lanes := len(mats)
	if k := K(); k.Interleave != nil && lanes == k.Lanes {
		k.Interleave(a, mats, elems)
		return
	}
	if lanes%8 == 0 { // AVX2's and AVX-512's widths: eight lanes at a time
		for g := 0; g < lanes; g += 8 {
			Interleave8(a, lanes, g, (*[8][]float32)(mats[g:g+8]), elems)
		}
		return
	}
	for e0 := 0; e0 < elems; e0 += laneBlock {
		e1 := min(e0+laneBlock, elems)
		block := a[e0*lanes : e1*lanes]
		for l, mat := range mats {
			for k, x := range mat[e0:e1] {
				block[k*lanes+l] = x
			}
		}
	}
}

// Interleave8 sets a[e*lanes+off+l] = m[l][e] for l < 8, e < elems: eight
// matrices into lanes off to off+7, or eight vectors into columns off to
// off+7 of a row-major matrix with lanes columns. Eight stores to
// consecutive floats an element, no bounds checks in the loop (3x the
// element-by-element loop's speed).
func Interleave8(a []float32, lanes, off int, m *[8][]float32, elems int) {
	m0, m1, m2, m3 := m[0][:elems], m[1][:elems], m[2][:elems], m[3][:elems]
	m4, m5, m6, m7 := m[4][:elems], m[5][:elems], m[6][:elems], m[7][:elems]
	a = a[:elems*lanes]
	for e := range elems {
		d := (*[8]float32)(a[e*lanes+off:])
		d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7] = m0[e], m1[e], m2[e], m3[e], m4[e], m5[e], m6[e], m7[e]
	}
}

// Deinterleave sets mats[l][e] = a[e*lanes+l] for e < elems (mats may be
// fewer than a's lanes).
func Deinterleave(mats [][]float32, a []float32, elems, lanes int) {
	if k := K(); k.Deinterleave != nil && len(mats) == lanes && lanes == k.Lanes {
		k.Deinterleave(mats, a, elems)
		return
	}
	g := 0
	if lanes%8 == 0 {
		for ; g+8 <= len(mats); g += 8 {
			deinterleave8((*[8][]float32)(mats[g:g+8]), a, lanes, g, elems)
		}
	}
	for e0 := 0; e0 < elems; e0 += laneBlock {
		e1 := min(e0+laneBlock, elems)
		block := a[e0*lanes : e1*lanes]
		for l, mat := range mats[g:] {
			out := mat[e0:e1]
			for k := range out {
				out[k] = block[k*lanes+g+l]
			}
		}
	}
}

// deinterleave8 is Interleave8's inverse.
func deinterleave8(m *[8][]float32, a []float32, lanes, off, elems int) {
	m0, m1, m2, m3 := m[0][:elems], m[1][:elems], m[2][:elems], m[3][:elems]
	m4, m5, m6, m7 := m[4][:elems], m[5][:elems], m[6][:elems], m[7][:elems]
	a = a[:elems*lanes]
	for e := range elems {
		d := (*[8]float32)(a[e*lanes+off:])
		m0[e], m1[e], m2[e], m3[e], m4[e], m5[e], m6[e], m7[e] = d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]
	}
}
