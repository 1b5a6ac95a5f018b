//go:build goexperiment.simd && amd64

package avx512

import "simd/archsimd"

// The width-specific part of the template: vector types and the few
// operations whose names carry the width.

const W = 16

type (
	vf = archsimd.Float32x16
	vi = archsimd.Int32x16
	vm = archsimd.Mask32x16
)

// panelRows is the rows of the QR panel kernel's tile (panel_amd64.s):
// 8 rows by two vectors of accumulators, two loads and 8 broadcasts fill
// the vector registers.
const panelRows = 8

const isaName = "avx512"

func splat(f float32) vf { return archsimd.BroadcastFloat32x16(f) }
func splatI(i int32) vi  { return archsimd.BroadcastInt32x16(i) }
func asI(v vf) vi        { return v.AsInt32x16() }
func asF(v vi) vf        { return v.AsFloat32x16() }

// Full-vector loads and stores of s[i:i+W]. Through an array pointer: the
// slice forms (LoadFloat32x16Slice(s[i:])) cost a reslice and two bounds
// checks a vector, which made a sum of squares in L1 1.5x slower.
func load(s []float32, i int) vf     { return loadArray((*[W]float32)(s[i : i+W])) }
func loadArray(a *[W]float32) vf     { return archsimd.LoadFloat32x16(a) }
func store(v vf, s []float32, i int) { v.Store((*[W]float32)(s[i : i+W])) }
func loadU16(s []uint16, i int) vi {
	return archsimd.LoadUint16x16((*[W]uint16)(s[i : i+W])).ExtendToUint32().AsInt32x16()
}
func storeU16(v vi, s []uint16, i int) {
	v.AsUint32x16().TruncateToUint16().Store((*[W]uint16)(s[i : i+W]))
}

// storeHighHalves stores the upper 16 bits of a's lanes, then of b's, at
// s[i:i+2W]: one VPERMI2W for both instead of a shift and a VPMOVDW each
// (bfloat16 narrowing 1.4x faster).
func storeHighHalves(a, b vi, s []uint16, i int) {
	a.AsUint16x32().ConcatPermute(b.AsUint16x32(), loadHalvesIndex()).Store((*[2 * W]uint16)(s[i : i+2*W]))
}

// highHalves indexes the odd (upper) 16-bit words of two concatenated vectors.
var highHalves = func() (ix [2 * W]uint16) {
	for i := range ix {
		ix[i] = uint16(2*i + 1)
	}
	return
}()

func loadHalvesIndex() archsimd.Uint16x32 { return archsimd.LoadUint16x32(&highHalves) }

// Partial ones for the last elements of a slice: missing lanes read as zero
// and are not written. They are calls, not intrinsics: tails only.
func loadPart(s []float32) vf     { return archsimd.LoadFloat32x16SlicePart(s) }
func storePart(v vf, s []float32) { v.StoreSlicePart(s) }
func loadU16Part(s []uint16) vi {
	return archsimd.LoadUint16x16SlicePart(s).ExtendToUint32().AsInt32x16()
}
func storeU16Part(v vi, s []uint16) { v.AsUint32x16().TruncateToUint16().StoreSlicePart(s) }

// sumTo4 and maxTo4 fold v's halves together down to 4 lanes, for the
// horizontal reductions.
func sumTo4(v vf) archsimd.Float32x4 {
	h := v.GetLo().Add(v.GetHi())
	return h.GetLo().Add(h.GetHi())
}
func maxTo4(v vf) archsimd.Float32x4 {
	h := v.GetLo().Max(v.GetHi())
	return h.GetLo().Max(h.GetHi())
}

// lanes is true in the first n lanes (all of them for n >= W).
func lanes(n int) vm {
	return archsimd.LoadInt32x16Slice(laneTable[W-min(n, W):]).Less(splatI(0))
}

// recip is 1/q without a division: VRCP14PS's 14-bit estimate and one
// Newton step.
func recip(q vf) vf { return newton(q, q.Reciprocal()) }

// broadcastAt is s[i] in every lane, loaded as part of a 4-lane vector so
// that no scalar float instruction runs (s needs 3 elements after i).
func broadcastAt(s []float32, i int) vf {
	return archsimd.LoadFloat32x4((*[4]float32)(s[i : i+4])).Broadcast1To16()
}

// transposeRows stores the transpose of the W x W block whose row r is at
// src[r] into the rows at dst (t: scratch). Element (r, c) moves to (c, r)
// in four stages, stage k swapping bit k of the row index with bit k of
// the column index: rows r and r|1<<k trade half their elements
// (swapBits). Two passes of two stages each keep four rows in registers at
// a time (Go allocates 15 vector registers): bits 0 and 1 over rows
// 4q..4q+3 into t, then bits 2 and 3 over rows q, q+4, q+8, q+12.
func transposeRows(dst, src *[W]*[W]float32, t *[W]vf) {
	lo0, hi0, lo1, hi1 := transposeIndices(0, 1)
	for q := 0; q < W; q += 4 {
		t[q], t[q+1], t[q+2], t[q+3] = swapQuad(loadArray(src[q]), loadArray(src[q+1]), loadArray(src[q+2]), loadArray(src[q+3]),
			lo0, hi0, lo1, hi1)
	}
	lo0, hi0, lo1, hi1 = transposeIndices(2, 3)
	for q := range 4 {
		x0, x4, x8, x12 := swapQuad(t[q], t[q+4], t[q+8], t[q+12], lo0, hi0, lo1, hi1)
		x0.Store(dst[q])
		x4.Store(dst[q+4])
		x8.Store(dst[q+8])
		x12.Store(dst[q+12])
	}
}

// swapQuad is two stages over rows x0..x3 (r, r+s, r+2s, r+3s for the
// first stage's s): rows s apart by the first stage's indices, then rows 2s
// apart by the second's.
func swapQuad(x0, x1, x2, x3 vf, lo0, hi0, lo1, hi1 archsimd.Uint32x16) (vf, vf, vf, vf) {
	x0, x1 = swapBits(x0, x1, lo0, hi0)
	x2, x3 = swapBits(x2, x3, lo0, hi0)
	x0, x2 = swapBits(x0, x2, lo1, hi1)
	x1, x3 = swapBits(x1, x3, lo1, hi1)
	return x0, x1, x2, x3
}

// swapBits is one exchange of a transposition stage: the new rows r and
// r|1<<k from the old ones x and y, by the stage's indices (transposeIndex).
func swapBits(x, y vf, lo, hi archsimd.Uint32x16) (vf, vf) {
	return x.ConcatPermute(y, lo), x.ConcatPermute(y, hi)
}

// transposeIndices are the indices of stages j and k.
func transposeIndices(j, k int) (loJ, hiJ, loK, hiK archsimd.Uint32x16) {
	return archsimd.LoadUint32x16(&transposeIndex[j][0]), archsimd.LoadUint32x16(&transposeIndex[j][1]),
		archsimd.LoadUint32x16(&transposeIndex[k][0]), archsimd.LoadUint32x16(&transposeIndex[k][1])
}

// transposeIndex[k] holds stage k's indices into rows r (bit k clear) and
// r|1<<k concatenated: [0] makes the new row r, whose columns with bit k
// set come from the old row r|1<<k (at the column with it cleared); [1]
// the new row r|1<<k, whose columns with bit k clear come from the old row
// r (at the column with it set).
var transposeIndex = func() (ix [4][2][W]uint32) {
	for k := range 4 {
		bit := 1 << k
		for c := range W {
			if c&bit != 0 {
				ix[k][0][c], ix[k][1][c] = uint32(W+c&^bit), uint32(W+c)
			} else {
				ix[k][0][c], ix[k][1][c] = uint32(c), uint32(c|bit)
			}
		}
	}
	return
}()
