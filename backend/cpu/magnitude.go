package cpu

import "math"

// MaxMagnitude is the largest |x[i]|'s bits: as magnitudes, float32s order
// as their bits do (an infinity's above every finite one's, a NaN's above
// that), so one integer maximum a value, four running at a time, finds the
// largest and says whether all are finite (bits below 0x7f800000). A
// matrix's scale (ops/svd, ops/internal/tridiag) and its check in one pass.
func MaxMagnitude(x []float32) uint32 {
	var t0, t1, t2, t3 uint32
	i := 0
	for ; i+4 <= len(x); i += 4 {
		t0 = max(t0, math.Float32bits(x[i])&0x7fffffff)
		t1 = max(t1, math.Float32bits(x[i+1])&0x7fffffff)
		t2 = max(t2, math.Float32bits(x[i+2])&0x7fffffff)
		t3 = max(t3, math.Float32bits(x[i+3])&0x7fffffff)
	}
	for ; i < len(x); i++ {
		t0 = max(t0, math.Float32bits(x[i])&0x7fffffff)
	}
	return max(t0, t1, t2, t3)
}

// ScalePow2 sets dst = src * scale, scale a power of two (MaxMagnitude's
// 2^-e): each product exact but where it is subnormal, rounded once. By
// Normalize where scale is a normal float32 (the float32 product is the
// same, and cheaper), else in float64 (a scale past float32's range).
func ScalePow2(dst, src []float32, scale float64) {
	if s := float32(scale); s >= 0x1p-126 && s <= 0x1p127 {
		K().Normalize(dst, src, nil, nil, 0, s)
		return
	}
	dst = dst[:len(src)]
	for i, x := range src {
		dst[i] = float32(float64(x) * scale)
	}
}
