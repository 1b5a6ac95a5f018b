package ops_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"metalcore/internal/core"
	"metalcore/ops/norm"
	"metalcore/ops/softmax"
	tu "metalcore/tests/testutil"
)

// One 2^24-wide row keeps float32 accuracy: row statistics and softmax
// within a few float32 ulps of the float64 values (a float32 running sum
// per vector lane was 100x further off).
func TestWideRows(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: 64 MB rows")
	}
	const cols = 1 << 24
	rng := tu.RNG(t)
	vals := make([]float64, cols)
	for i := range vals {
		vals[i] = 1 + rng.Float64()
	}
	var sum, sumSq float64
	for _, v := range vals {
		v = float64(float32(v))
		sum += v
		sumSq += v * v
	}
	mean := sum / cols
	var centered float64
	for _, v := range vals {
		d := float64(float32(v)) - mean
		centered += d * d
	}
	const eps = 1e-5
	rel := func(got, want float64) float64 { return math.Abs(got-want) / math.Abs(want) }
	const tol = 2e-6
	tu.ForEachBackend(t, func(t *testing.T, b tu.Backend) {
		shape := []int64{1, cols}
		x := b.New(core.F32, shape).Set(vals)
		y := b.New(core.F32, shape)
		m, r := b.New(core.F32, []int64{1}), b.New(core.F32, []int64{1})
		require.NoError(t, norm.RMSNormFwd(x.Ptr(), nil, eps, y.Ptr(), r.Ptr(), nil))
		got, want := r.Values()[0], 1/math.Sqrt(sumSq/cols+eps)
		require.Less(t, rel(got, want), tol, "RMSNorm rstd %g, float64 %g", got, want)
		require.NoError(t, norm.LayerNormFwd(x.Ptr(), nil, nil, eps, y.Ptr(), m.Ptr(), r.Ptr(), nil))
		require.Less(t, rel(m.Values()[0], mean), tol, "LayerNorm mean %g, float64 %g", m.Values()[0], mean)
		want = 1 / math.Sqrt(centered/cols+eps)
		require.Less(t, rel(r.Values()[0], want), tol, "LayerNorm rstd %g, float64 %g", r.Values()[0], want)
		require.NoError(t, softmax.Fwd(x.Ptr(), y.Ptr(), nil))
		var expSum float64
		stored := x.Values()
		top := 0.0
		for _, v := range stored {
			top = max(top, v)
		}
		for _, v := range stored {
			expSum += math.Exp(v - top)
		}
		worst := 0.0
		for i, v := range y.Values() {
			worst = max(worst, rel(v, math.Exp(stored[i]-top)/expSum))
		}
		require.Less(t, worst, 4*tol, "softmax")
	})
}
