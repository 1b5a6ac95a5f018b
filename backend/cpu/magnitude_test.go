package cpu

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestMaxMagnitude against a float64 maximum of |x|, over lengths that end
// inside and after the four-way loop, with an infinity and a NaN planted
// at every position.
func TestMaxMagnitude(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for n := range 13 {
		x := make([]float32, n)
		for i := range x {
			// magnitudes from subnormal to large, either sign
			x[i] = float32(rng.NormFloat64() * math.Ldexp(1, rng.IntN(260)-140))
		}
		want := 0.0
		for _, v := range x {
			want = math.Max(want, math.Abs(float64(v)))
		}
		if got := math.Float32frombits(MaxMagnitude(x)); float64(got) != want {
			t.Errorf("n=%d: %g, want %g", n, got, want)
		}
		for i := range x {
			for _, planted := range []float32{float32(math.Inf(-1)), float32(math.NaN())} {
				y := append([]float32(nil), x...)
				y[i] = planted
				bits := MaxMagnitude(y)
				if planted != planted && bits <= 0x7f800000 || planted == planted && bits != 0x7f800000 {
					t.Errorf("n=%d, %g at %d: bits %#x", n, planted, i, bits)
				}
			}
		}
	}
}
