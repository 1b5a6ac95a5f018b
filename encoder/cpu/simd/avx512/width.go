//go:build goexperiment.simd && amd64

package avx512

import "simd/archsimd"

// The width-specific part of the template: vector types and the few
// operations whose names carry the width.

const W = 16

type (
	vf = archsimd.Float32x16
	vi = archsimd.Int32x16
)

const isaName = "avx512"

// loadF and the other loads and stores take partial vectors at the end of a
// slice: missing lanes read as zero and are not written.
func loadF(s []float32) vf      { return archsimd.LoadFloat32x16SlicePart(s) }
func storeF(v vf, s []float32)  { v.StoreSlicePart(s) }
func splat(f float32) vf        { return archsimd.BroadcastFloat32x16(f) }
func splatI(i int32) vi         { return archsimd.BroadcastInt32x16(i) }
func asI(v vf) vi               { return v.AsInt32x16() }
func asF(v vi) vf               { return v.AsFloat32x16() }
func loadU16(s []uint16) vi     { return archsimd.LoadUint16x16SlicePart(s).ExtendToUint32().AsInt32x16() }
func storeU16(v vi, s []uint16) { v.AsUint32x16().TruncateToUint16().StoreSlicePart(s) }

// lanes is true in the first n lanes (all of them for n >= W).
func lanes(n int) archsimd.Mask32x16 {
	return archsimd.LoadInt32x16Slice(laneTable[W-min(n, W):]).Less(splatI(0))
}
