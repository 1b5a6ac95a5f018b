package softmax

import (
	"math"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"metalcore/internal/core"
	tu "metalcore/tests/testutil"
)

func outFor(c tu.Case, in *tu.Tensor) *tu.Tensor {
	if c.InPlace {
		return in
	}
	return c.New(c.Shape, 0)
}

func TestFwd(t *testing.T) { tu.Cases(t, tu.Shapes, checkFwd) }

// manyShortRows: blocks of several rows a warp (the GPU short-rows
// kernels), the last block's and warp's partly past the end.
var manyShortRows = [][]int64{{333, 8}, {1000, 24}, {129, 64}, {257, 128}, {3, 67, 16}}

func TestFwdManyShortRows(t *testing.T) { tu.Cases(t, manyShortRows, checkFwd) }

func checkFwd(t *testing.T, c tu.Case) {
	x := c.New(c.Shape, 0)
	xs := x.Rand(tu.RNG(t), 4)
	y := outFor(c, x)
	require.NoError(t, Fwd(x.Ptr(), y.Ptr(), nil), c)
	var want []float64
	for _, row := range tu.Rows(xs, c.Cols()) {
		want = append(want, RefSoftmax(row)...)
	}
	tu.Close(t, c.String()+" y", y.Values(), want, tu.Tol(c.DT))
	require.True(t, y.PaddingPoisoned(), "%v: wrote outside y's elements", c)
}

// A 16-bit x with a float32 y (softmax(x, dtype=torch.float32)): the
// float32 result of the 16-bit values, to float32 accuracy.
func TestFwdFloat32Output(t *testing.T) {
	tu.Cases(t, slices.Concat(tu.Shapes, manyShortRows), func(t *testing.T, c tu.Case) {
		if c.DT == core.F32 || c.InPlace {
			return // the same dtype (TestFwd), or in place: not with two dtypes
		}
		x := c.New(c.Shape, 0)
		xs := x.Rand(tu.RNG(t), 4)
		y := c.New(c.Shape, core.F32)
		require.NoError(t, Fwd(x.Ptr(), y.Ptr(), nil), c)
		var want []float64
		for _, row := range tu.Rows(xs, c.Cols()) {
			want = append(want, RefSoftmax(row)...)
		}
		tu.Close(t, c.String()+" float32 y", y.Values(), want, 1e-5)
		require.True(t, y.PaddingPoisoned(), "%v: wrote outside y's elements", c)
	})
	// a 16-bit y of a float32 x, or of the other 16-bit type, stays refused
	for _, pair := range [][2]core.DType{{core.F32, core.BF16}, {core.F16, core.BF16}, {core.BF16, core.F16}} {
		x, y := tu.New(pair[0], []int64{2, 8}), tu.New(pair[1], []int64{2, 8})
		require.Equal(t, core.ErrUnsupportedDType, tu.Status(t, Fwd(x.Ptr(), y.Ptr(), nil)), "%v", pair)
	}
}

// A masked row (-inf entries, as attention masks use) and a row whose
// maximum moves up in a later chunk.
func TestFwdMaskedAndRisingRows(t *testing.T) {
	tu.ForEachBackend(t, func(t *testing.T, b tu.Backend) {
		for _, dt := range tu.DTypes {
			cols := 3000
			xs := make([]float64, 2*cols)
			for i := range cols {
				xs[i] = math.Inf(-1)
				if i%7 == 0 {
					xs[i] = float64(i % 5)
				}
				xs[cols+i] = float64(i) / 100 // max in the last chunk
			}
			c := tu.Case{Backend: b, DT: dt, Shape: []int64{2, int64(cols)}}
			x := c.New(c.Shape, 0).Set(xs)
			xs = x.Values() // as rounded to dt
			y := c.New(c.Shape, 0)
			require.NoError(t, Fwd(x.Ptr(), y.Ptr(), nil))
			want := append(RefSoftmax(xs[:cols]), RefSoftmax(xs[cols:])...)
			tu.Close(t, c.String()+" y", y.Values(), want, tu.Tol(dt))
		}
	})
}

// Rows whose maximum is not finite are NaN throughout, as the float64
// reference's are: one holding a NaN, one +inf, one all -inf.
func TestFwdNonFiniteRows(t *testing.T) {
	tu.ForEachBackend(t, func(t *testing.T, b tu.Backend) {
		for _, dt := range tu.DTypes {
			const cols = 37
			xs := make([]float64, 4*cols)
			for i := range cols {
				xs[i], xs[cols+i], xs[2*cols+i], xs[3*cols+i] = float64(i), float64(i), math.Inf(-1), float64(i)/10
			}
			xs[5], xs[cols+30] = math.NaN(), math.Inf(1)
			c := tu.Case{Backend: b, DT: dt, Shape: []int64{4, cols}}
			x := c.New(c.Shape, 0).Set(xs)
			y := c.New(c.Shape, 0)
			y.Poison()
			require.NoError(t, Fwd(x.Ptr(), y.Ptr(), nil))
			got, xs := y.Values(), x.Values()
			for r := range 4 {
				want := RefSoftmax(xs[r*cols : (r+1)*cols])
				for i, w := range want {
					g := got[r*cols+i]
					if math.IsNaN(w) {
						require.True(t, math.IsNaN(g), "%v row %d [%d] = %g, want NaN", dt, r, i, g)
					} else {
						require.InDelta(t, w, g, tu.Tol(dt)*(w+0.1), "%v row %d [%d]", dt, r, i)
					}
				}
			}
		}
	})
}

func TestBwd(t *testing.T) {
	tu.Cases(t, slices.Concat(tu.Shapes, manyShortRows), func(t *testing.T, c tu.Case) {
		rng := tu.RNG(t)
		dy, y := c.New(c.Shape, 0), c.New(c.Shape, 0)
		dyv := dy.Rand(rng, 1)
		var ys []float64
		for _, row := range tu.Rows(y.Rand(rng, 2), c.Cols()) {
			ys = append(ys, RefSoftmax(row)...)
		}
		ys = y.Set(ys).Values()
		dx := outFor(c, dy)
		require.NoError(t, Bwd(dy.Ptr(), y.Ptr(), dx.Ptr(), nil), c)
		var want []float64
		dyRows := tu.Rows(dyv, c.Cols())
		for r, row := range tu.Rows(ys, c.Cols()) {
			want = append(want, RefSoftmaxBwd(dyRows[r], row)...)
		}
		tu.CloseScaled(t, c.String()+" dx", dx.Values(), want, 2*tu.Tol(c.DT), tu.RMS(dyv)*tu.RMS(ys))
	})
}

// Float32 dy and y with a 16-bit dx (the gradient of softmax(x,
// dtype=torch.float32) in x's dtype): the float32 rows' gradient rounded
// once to dx's dtype.
func TestBwdFloat32Rows(t *testing.T) {
	tu.Cases(t, slices.Concat(tu.Shapes, manyShortRows), func(t *testing.T, c tu.Case) {
		if c.DT == core.F32 || c.InPlace {
			return // the same dtype (TestBwd), or in place: not with two dtypes
		}
		rng := tu.RNG(t)
		dy, y := c.New(c.Shape, core.F32), c.New(c.Shape, core.F32)
		dyv := dy.Rand(rng, 1)
		var ys []float64
		for _, row := range tu.Rows(y.Rand(rng, 2), c.Cols()) {
			ys = append(ys, RefSoftmax(row)...)
		}
		ys = y.Set(ys).Values()
		dx := c.New(c.Shape, 0)
		require.NoError(t, Bwd(dy.Ptr(), y.Ptr(), dx.Ptr(), nil), c)
		var want []float64
		dyRows := tu.Rows(dyv, c.Cols())
		for r, row := range tu.Rows(ys, c.Cols()) {
			want = append(want, RefSoftmaxBwd(dyRows[r], row)...)
		}
		tu.CloseScaled(t, c.String()+" 16-bit dx", dx.Values(), want, tu.Tol(c.DT), tu.RMS(dyv)*tu.RMS(ys))
		require.True(t, dx.PaddingPoisoned(), "%v: wrote outside dx's elements", c)
		require.Equal(t, dyv, dy.Values(), "%v: dy changed", c)
	})
	// a float32 dx of 16-bit rows, a dx of the other 16-bit type, and dy and
	// y of two dtypes stay refused
	for _, dts := range [][3]core.DType{{core.BF16, core.BF16, core.F32}, {core.F16, core.F16, core.BF16},
		{core.F32, core.BF16, core.BF16}, {core.BF16, core.F32, core.BF16}} {
		dy, y, dx := tu.New(dts[0], []int64{2, 8}), tu.New(dts[1], []int64{2, 8}), tu.New(dts[2], []int64{2, 8})
		require.Equal(t, core.ErrUnsupportedDType, tu.Status(t, Bwd(dy.Ptr(), y.Ptr(), dx.Ptr(), nil)), "%v", dts)
	}
}
