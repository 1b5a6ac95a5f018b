//go:build goexperiment.simd && amd64

package avx2

import "simd/archsimd"

// The width-specific part of the template: vector types and the few
// operations whose names carry the width.

const W = 8

type (
	vf = archsimd.Float32x8
	vi = archsimd.Int32x8
	vm = archsimd.Mask32x8
)

// panelRows is the rows of the QR panel kernel's tile (panel_amd64.s):
// 4 rows by two vectors of accumulators, two loads and 4 broadcasts fill
// the vector registers.
const panelRows = 4

const isaName = "avx2"

func splat(f float32) vf { return archsimd.BroadcastFloat32x8(f) }
func splatI(i int32) vi  { return archsimd.BroadcastInt32x8(i) }
func asI(v vf) vi        { return v.AsInt32x8() }
func asF(v vi) vf        { return v.AsFloat32x8() }

// Full-vector loads and stores of s[i:i+W], through an array pointer (see
// the avx512 width.go).
func load(s []float32, i int) vf     { return loadArray((*[W]float32)(s[i : i+W])) }
func loadArray(a *[W]float32) vf     { return archsimd.LoadFloat32x8(a) }
func store(v vf, s []float32, i int) { v.Store((*[W]float32)(s[i : i+W])) }

// block4 is four vectors side by side: one bounds check for the four
// (load's are two a vector), where a loop walks a slice by whole blocks.
type block4 [4 * W]float32

func (b *block4) at(j int) vf { return loadArray((*[W]float32)(b[j*W : (j+1)*W])) }

func (b *block4) put(j int, v vf) { v.Store((*[W]float32)(b[j*W : (j+1)*W])) }

func loadU16(s []uint16, i int) vi {
	return archsimd.LoadUint16x8((*[W]uint16)(s[i : i+W])).ExtendToUint32().AsInt32x8()
}
func storeU16(v vi, s []uint16, i int) { narrow(v).Store((*[W]uint16)(s[i : i+W])) }

// storeHighHalves stores the upper 16 bits of a's lanes, then of b's, at
// s[i:i+2W] (AVX2 has no word permute across two vectors).
func storeHighHalves(a, b vi, s []uint16, i int) {
	storeU16(a.ShiftAllRight(16), s, i)
	storeU16(b.ShiftAllRight(16), s, i+W)
}

// Partial ones for the last elements of a slice: missing lanes read as zero
// and are not written. They are calls, not intrinsics: tails only.
func loadPart(s []float32) vf     { return archsimd.LoadFloat32x8SlicePart(s) }
func storePart(v vf, s []float32) { v.StoreSlicePart(s) }
func loadU16Part(s []uint16) vi {
	return archsimd.LoadUint16x8SlicePart(s).ExtendToUint32().AsInt32x8()
}
func storeU16Part(v vi, s []uint16) { narrow(v).StoreSlicePart(s) }

// narrow packs with VPACKUSDW (AVX2 has no truncating narrow): masked to 16
// bits first so the signed saturation cannot clamp.
func narrow(v vi) archsimd.Uint16x8 {
	v = v.And(splatI(0xffff))
	return v.GetLo().SaturateToUint16Concat(v.GetHi())
}

// sumTo4 and maxTo4 fold v's halves together down to 4 lanes, for the
// horizontal reductions.
func sumTo4(v vf) archsimd.Float32x4 { return v.GetLo().Add(v.GetHi()) }
func maxTo4(v vf) archsimd.Float32x4 { return v.GetLo().Max(v.GetHi()) }

// lanes is true in the first n lanes (all of them for n >= W).
func lanes(n int) vm {
	return archsimd.LoadInt32x8Slice(laneTable[W-min(n, W):]).Less(splatI(0))
}

// recip is 1/q without a division: VRCPPS's 12-bit estimate and two Newton
// steps.
func recip(q vf) vf { return newton(q, newton(q, q.Reciprocal())) }

// broadcastAt is s[i] in every lane, loaded as part of a 4-lane vector so
// that no scalar float instruction runs (s needs 3 elements after i).
func broadcastAt(s []float32, i int) vf {
	return archsimd.LoadFloat32x4((*[4]float32)(s[i : i+4])).Broadcast1To8()
}
