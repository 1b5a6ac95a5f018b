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

func loadF(s []float32) vf       { return archsimd.LoadFloat32x16Slice(s) }
func storeF(v vf, s []float32)   { v.StoreSlice(s) }
func splat(f float32) vf         { return archsimd.BroadcastFloat32x16(f) }
func splatI(i int32) vi          { return archsimd.BroadcastInt32x16(i) }
func asI(v vf) vi                { return v.AsInt32x16() }
func asF(v vi) vf                { return v.AsFloat32x16() }
func loadU16(s []uint16) vi      { return archsimd.LoadUint16x16Slice(s).ExtendToUint32().AsInt32x16() }
func storeU16(v vi, s []uint16)  { v.AsUint32x16().TruncateToUint16().StoreSlice(s) }
