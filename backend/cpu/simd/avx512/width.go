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

// block4 is four vectors side by side: one bounds check for the four
// (load's are two a vector), where a loop walks a slice by whole blocks.
type block4 [4 * W]float32

func (b *block4) at(j int) vf     { return loadArray((*[W]float32)(b[j*W : (j+1)*W])) }
func (b *block4) put(j int, v vf) { v.Store((*[W]float32)(b[j*W : (j+1)*W])) }

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
