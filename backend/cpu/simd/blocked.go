package simd

// SumBlock is the longest stretch a row reduction adds up in float32: the
// vector kernels keep 32 partial sums, so within a block each adds at most
// 128 terms; the blocks' results are added in float64. A single float32
// running sum over a 2^26-element row lost about 1e-3 of a norm, and a
// softmax of 2^31 equal values saturated at 2^24 per partial sum.
const SumBlock = 4096

// Blocked is t with its row reductions applied SumBlock elements at a time
// and the results summed in float64; rows up to SumBlock long take one call.
func Blocked(t Table) Table {
	sumSq, dot, sumDot, mulSumDot := t.SumSq, t.Dot, t.SumDot, t.MulSumDot
	shiftedSums, expSum := t.ShiftedSums, t.ExpSum
	t.SumSq = func(x []float32) float32 {
		return sum1(len(x), func(lo, hi int) float32 { return sumSq(x[lo:hi]) })
	}
	t.Dot = func(a, b []float32) float32 {
		return sum1(len(a), func(lo, hi int) float32 { return dot(a[lo:hi], b[lo:hi]) })
	}
	t.SumDot = func(a, b []float32, shift float32) (float32, float32) {
		return sum2(len(a), func(lo, hi int) (float32, float32) { return sumDot(a[lo:hi], b[lo:hi], shift) })
	}
	t.MulSumDot = func(g, a, w, b []float32, shift float32) (float32, float32) {
		return sum2(len(g), func(lo, hi int) (float32, float32) {
			return mulSumDot(g[lo:hi], a[lo:hi], w[lo:hi], b[lo:hi], shift)
		})
	}
	t.ShiftedSums = func(x []float32, shift float32) (float32, float32) {
		return sum2(len(x), func(lo, hi int) (float32, float32) { return shiftedSums(x[lo:hi], shift) })
	}
	t.ExpSum = func(dst, x []float32, m float32) float32 {
		return sum1(len(x), func(lo, hi int) float32 { return expSum(dst[lo:hi], x[lo:hi], m) })
	}
	r := t.BF16Rows
	t.BF16Rows.SumSq = func(x []uint16) float32 {
		return sum1(len(x), func(lo, hi int) float32 { return r.SumSq(x[lo:hi]) })
	}
	t.BF16Rows.AddSumSq = func(dst, a, b []uint16) float32 {
		return sum1(len(dst), func(lo, hi int) float32 { return r.AddSumSq(dst[lo:hi], a[lo:hi], b[lo:hi]) })
	}
	t.BF16Rows.ShiftedSums = func(x []uint16, shift float32) (float32, float32) {
		return sum2(len(x), func(lo, hi int) (float32, float32) { return r.ShiftedSums(x[lo:hi], shift) })
	}
	t.BF16Rows.GradDots = func(dy, x []uint16, w []float32, shift float32) (float32, float32) {
		return sum2(len(dy), func(lo, hi int) (float32, float32) {
			var wb []float32
			if w != nil {
				wb = w[lo:hi]
			}
			return r.GradDots(dy[lo:hi], x[lo:hi], wb, shift)
		})
	}
	return t
}

func sum1(n int, f func(lo, hi int) float32) float32 {
	if n <= SumBlock {
		return f(0, n)
	}
	var s float64
	for lo := 0; lo < n; lo += SumBlock {
		s += float64(f(lo, min(lo+SumBlock, n)))
	}
	return float32(s)
}

func sum2(n int, f func(lo, hi int) (float32, float32)) (float32, float32) {
	if n <= SumBlock {
		return f(0, n)
	}
	var s, t float64
	for lo := 0; lo < n; lo += SumBlock {
		a, b := f(lo, min(lo+SumBlock, n))
		s, t = s+float64(a), t+float64(b)
	}
	return float32(s), float32(t)
}
