package kernels

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"metalcore/backend/cpu/simd"
	"metalcore/ops/norm"
	"metalcore/ops/softmax"
	tu "metalcore/tests/testutil"
)

func bf16(v []float32) []uint16 {
	out := make([]uint16, len(v))
	for i, x := range v {
		out[i] = simd.F32ToBF16(x)
	}
	return out
}

func widen(v []uint16) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(simd.BF16ToF32(x))
	}
	return out
}

func f64(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

// The Go API computes what the ops' float64 references say, in float32 and
// bfloat16, for shapes the vector width does not divide.
func TestAgainstReferences(t *testing.T) {
	rng := tu.RNG(t)
	const rows, cols = 5, 37
	x, w, b := make([]float32, rows*cols), make([]float32, cols), make([]float32, cols)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	for i := range w {
		w[i], b[i] = float32(rng.NormFloat64()), float32(rng.NormFloat64())
	}
	var wantRMS, wantLN, wantSM []float64
	for r := range rows {
		row := f64(x[r*cols : (r+1)*cols])
		y, _ := norm.RefRMSNorm(row, f64(w), 1e-5)
		wantRMS = append(wantRMS, y...)
		y, _, _ = norm.RefLayerNorm(row, f64(w), f64(b), 1e-5)
		wantLN = append(wantLN, y...)
		wantSM = append(wantSM, softmax.RefSoftmax(row)...)
	}
	y := make([]float32, len(x))
	require.NoError(t, RMSNorm(y, x, w, rows, cols, 1e-5))
	tu.Close(t, "RMSNorm", f64(y), wantRMS, 1e-5)
	require.NoError(t, LayerNorm(y, x, w, b, rows, cols, 1e-5))
	tu.Close(t, "LayerNorm", f64(y), wantLN, 1e-5)
	require.NoError(t, Softmax(y, x, rows, cols))
	tu.Close(t, "Softmax", f64(y), wantSM, 1e-5)
	xb, wb, bb, yb := bf16(x), bf16(w), bf16(b), make([]uint16, len(x))
	require.NoError(t, RMSNormBF16(yb, xb, wb, rows, cols, 1e-5))
	tu.Close(t, "RMSNormBF16", widen(yb), wantRMS, 0.05)
	require.NoError(t, LayerNormBF16(yb, xb, wb, bb, rows, cols, 1e-5))
	tu.Close(t, "LayerNormBF16", widen(yb), wantLN, 0.05)
	require.NoError(t, SoftmaxBF16(yb, xb, rows, cols))
	tu.Close(t, "SoftmaxBF16", widen(yb), wantSM, 0.05)
	// in place, and the elementwise ops
	z := append([]float32(nil), x...)
	require.NoError(t, SiLU(z, z))
	for i, v := range x {
		require.InDelta(t, float64(v)/(1+math.Exp(-float64(v))), z[i], 1e-5)
	}
	require.NoError(t, GELUBF16(yb, xb, Erf))
	require.NoError(t, SiLUBF16(yb, xb))
	require.NoError(t, GELU(y, x, Erf))
	require.NoError(t, AdamWBF16(AdamWConfig{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, Step: 1},
		[][]uint16{xb, nil}, [][]uint16{bf16(x), nil}, [][]float32{make([]float32, len(x)), nil}, [][]float32{make([]float32, len(x)), nil}))
}

// Slices of the wrong length, a missing output, mismatched lists and bad
// values are errors, and nothing is written.
func TestErrors(t *testing.T) {
	y := []float32{9, 9, 9, 9}
	for name, err := range map[string]error{
		"short x":          RMSNorm(y, []float32{1, 2, 3}, nil, 2, 2, 1e-5),
		"short weight":     LayerNorm(y, []float32{1, 2, 3, 4}, []float32{1}, nil, 2, 2, 1e-5),
		"nil y":            Softmax(nil, []float32{1, 2, 3, 4}, 2, 2),
		"negative eps":     RMSNorm(y, []float32{1, 2, 3, 4}, nil, 2, 2, -1),
		"bad GELU form":    GELU(y, []float32{1, 2, 3, 4}, 7),
		"q's shape":        QR(y[:2], y, []float32{1, 2, 3, 4}, 1, 2, 2, Reduced),
		"mismatched lists": AdamW(AdamWConfig{LR: 1, Beta1: 0.9, Beta2: 0.9, Step: 1}, [][]float32{y}, nil, nil, nil),
		"negative rows":    Softmax(y, []float32{1, 2, 3, 4}, -2, -2),
	} {
		require.Error(t, err, name)
		require.Contains(t, err.Error(), "kernels.", name)
		require.Equal(t, []float32{9, 9, 9, 9}, y, name)
	}
}

// ISA names the table the kernels run on, which the build decides: the
// portable one without GOEXPERIMENT=simd.
func TestISA(t *testing.T) {
	require.Contains(t, []string{"avx512", "avx2", "portable"}, ISA())
	if !simdBuild {
		require.Equal(t, "portable", ISA())
	}
}
