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
