package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
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

// TestScalePow2 against float32(float64(x) * scale), each product rounded
// once, at scales inside float32's normal range (Normalize, on every ISA)
// and outside it (float64), over values from subnormal to near the top
// of float32's range, in place and not, in the vector loop and the tail.
func TestScalePow2(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	defer Use(K().Name)
	for _, isa := range ISAs() {
		require.NoError(t, Use(isa))
		for _, e := range []int{-140, -127, -126, -3, 0, 7, 127, 130} {
			scale := math.Ldexp(1, e)
			for _, n := range []int{1, 7, 16, 37} {
				src := make([]float32, n)
				for i := range src {
					src[i] = float32(rng.NormFloat64() * math.Ldexp(1, rng.IntN(250)-125))
				}
				src[0] = float32(math.Copysign(0, -1))
				dst := make([]float32, n)
				ScalePow2(dst, src, scale)
				for i, x := range src {
					want := float32(float64(x) * scale)
					if math.Float32bits(dst[i]) != math.Float32bits(want) {
						t.Errorf("%s scale 2^%d n=%d [%d]: %g * scale = %g, want %g", isa, e, n, i, x, dst[i], want)
					}
				}
				ScalePow2(src, src, scale)
				require.Equal(t, dst, src, "%s scale 2^%d n=%d in place", isa, e, n)
			}
		}
	}
}
