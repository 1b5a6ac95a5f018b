package norm

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"metalcore/backend/cpu"
	"metalcore/internal/core"
	tu "metalcore/tests/testutil"
)

const eps = 1e-5

// perRow makes a poisoned float32 [rows] tensor for rstd/mean.
func perRow(c tu.Case) *tu.Tensor { return c.Backend.New(core.F32, []int64{int64(c.Rows())}) }

// outFor is the output tensor of a case: x itself in place, else new.
func outFor(c tu.Case, x *tu.Tensor) *tu.Tensor {
	if c.InPlace {
		return x
	}
	return c.New(c.Shape, 0)
}

// weights returns a per-column tensor and its values, or nils when absent.
func weights(c tu.Case, t *testing.T, present bool, scale float64) (*tu.Tensor, []float64) {
	if !present {
		return nil, nil
	}
	w := c.Backend.New(c.DT, []int64{int64(c.Cols())})
	v := w.Rand(tu.RNG(t), scale)
	for i := range v {
		v[i] += 1
	}
	return w, w.Set(v).Values()
}

func ptr(t *tu.Tensor) *core.Tensor {
	if t == nil {
		return nil
	}
	return t.Ptr()
}

func TestRMSNormFwd(t *testing.T) {
	tu.Cases(t, tu.Shapes, func(t *testing.T, c tu.Case) {
		for _, withW := range []bool{true, false} {
			rng := tu.RNG(t)
			x := c.New(c.Shape, 0)
			xs := x.Rand(rng, 2)
			w, ws := weights(c, t, withW, 0.5)
			y, rstd := outFor(c, x), perRow(c)
			require.NoError(t, RMSNormFwd(x.Ptr(), ptr(w), eps, y.Ptr(), rstd.Ptr(), nil), c)
			var want, wantR []float64
			for _, row := range tu.Rows(xs, c.Cols()) {
				yr, r := RefRMSNorm(row, ws, eps)
				want, wantR = append(want, yr...), append(wantR, r)
			}
			tu.Close(t, c.String()+" y", y.Values(), want, tu.Tol(c.DT))
			tu.Close(t, c.String()+" rstd", rstd.Values(), wantR, tu.Tol(core.F32))
			require.True(t, y.PaddingPoisoned(), "%v: wrote outside y's elements", c)
		}
	})
}

func TestFusedAddRMSNormFwd(t *testing.T) {
	tu.Cases(t, tu.Shapes, func(t *testing.T, c tu.Case) {
		rng := tu.RNG(t)
		x, res := c.New(c.Shape, 0), c.New(c.Shape, 0)
		xs, rs := x.Rand(rng, 1), res.Rand(rng, 3)
		w, ws := weights(c, t, true, 0.5)
		y, ro := outFor(c, x), outFor(c, res)
		rstd := perRow(c)
		require.NoError(t, FusedAddRMSNormFwd(x.Ptr(), res.Ptr(), w.Ptr(), eps, y.Ptr(), ro.Ptr(), rstd.Ptr(), nil), c)
		sum := make([]float64, len(xs))
		for i := range xs {
			sum[i] = tu.Round(c.DT, float64(float32(xs[i])+float32(rs[i])))
		}
		var want, wantR []float64
		for _, row := range tu.Rows(sum, c.Cols()) {
			yr, r := RefRMSNorm(row, ws, eps)
			want, wantR = append(want, yr...), append(wantR, r)
		}
		require.Equal(t, sum, ro.Values(), "%v: residual_out", c)
		tu.Close(t, c.String()+" y", y.Values(), want, tu.Tol(c.DT))
		tu.Close(t, c.String()+" rstd", rstd.Values(), wantR, tu.Tol(core.F32))
	})
}

func TestLayerNormFwd(t *testing.T) {
	tu.Cases(t, tu.Shapes, func(t *testing.T, c tu.Case) {
		for _, affine := range []bool{true, false} {
			rng := tu.RNG(t)
			x := c.New(c.Shape, 0)
			xs := x.Rand(rng, 2)
			for i := range xs { // a large mean over a small spread
				xs[i] += 100
			}
			xs = x.Set(xs).Values()
			w, wv := weights(c, t, affine, 0.5)
			b, bv := weights(c, t, affine, 0.1)
			y, mean, rstd := outFor(c, x), perRow(c), perRow(c)
			require.NoError(t, LayerNormFwd(x.Ptr(), ptr(w), ptr(b), eps, y.Ptr(), mean.Ptr(), rstd.Ptr(), nil), c)
			var want, wantM, wantR []float64
			for _, row := range tu.Rows(xs, c.Cols()) {
				yr, m, r := RefLayerNorm(row, wv, bv, eps)
				want, wantM, wantR = append(want, yr...), append(wantM, m), append(wantR, r)
			}
			tu.Close(t, c.String()+" y", y.Values(), want, tu.Tol(c.DT))
			tu.Close(t, c.String()+" mean", mean.Values(), wantM, tu.Tol(core.F32))
			tu.Close(t, c.String()+" rstd", rstd.Values(), wantR, 1e-3) // var of data ~1 around 100 in fp32
		}
	})
}

// bwdInputs makes dy and x with their values, and rstd (and mean) from the
// reference forward pass, stored as float32 like the forward kernel's.
func bwdInputs(t *testing.T, c tu.Case, layer bool, ws, bs []float64) (dy, x *tu.Tensor, dyv, xv []float64, mean, rstd *tu.Tensor) {
	rng := tu.RNG(t)
	dy, x = c.New(c.Shape, 0), c.New(c.Shape, 0)
	dyv, xv = dy.Rand(rng, 1), x.Rand(rng, 2)
	if layer { // a large mean over a small spread, as in the forward test
		for i := range xv {
			xv[i] += 100
		}
		xv = x.Set(xv).Values()
	}
	var ms, rs []float64
	for _, row := range tu.Rows(xv, c.Cols()) {
		if layer {
			_, m, r := RefLayerNorm(row, ws, bs, eps)
			ms, rs = append(ms, m), append(rs, r)
		} else {
			_, r := RefRMSNorm(row, ws, eps)
			rs = append(rs, r)
		}
	}
	rstd = perRow(c).Set(rs)
	if layer {
		mean = perRow(c).Set(ms)
	}
	return
}

func workspace(t *testing.T, size func(*core.Tensor) (int64, error), x *tu.Tensor) *tu.Tensor {
	n, err := size(x.Ptr())
	require.NoError(t, err)
	return x.On().New(core.F32, []int64{n / 4})
}

func TestRMSNormBwd(t *testing.T) {
	tu.Cases(t, tu.Shapes, func(t *testing.T, c tu.Case) {
		for _, withW := range []bool{true, false} {
			w, wv := weights(c, t, withW, 0.5)
			dy, x, dyv, xv, _, rstd := bwdInputs(t, c, false, wv, nil)
			dx := outFor(c, dy)
			var dw, ws *tu.Tensor
			if withW {
				dw = c.Backend.New(c.DT, []int64{int64(c.Cols())})
				ws = workspace(t, RMSNormBwdWorkspace, x)
			}
			require.NoError(t, RMSNormBwd(dy.Ptr(), x.Ptr(), ptr(w), rstd.Ptr(), dx.Ptr(), ptr(dw), ptr(ws), nil), c)
			var want []float64
			var wantDW []float64
			if withW {
				wantDW = make([]float64, c.Cols())
			}
			rsv := rstd.Values()
			dyRows := tu.Rows(dyv, c.Cols())
			for r, row := range tu.Rows(xv, c.Cols()) {
				want = append(want, RefRMSNormBwd(dyRows[r], row, wv, rsv[r], wantDW)...)
			}
			tu.CloseScaled(t, c.String()+" dx", dx.Values(), want, 2*tu.Tol(c.DT), gradScale(dyv, rsv))
			if withW {
				tu.CloseScaled(t, c.String()+" dweight", dw.Values(), wantDW, 2*tu.Tol(c.DT), sumScale(c, dyv, xv, rsv))
			}
		}
	})
}

func TestLayerNormBwd(t *testing.T) {
	tu.Cases(t, tu.Shapes, func(t *testing.T, c tu.Case) {
		// no weight; both per-column gradients (one launch sums them); either alone
		for _, g := range []struct{ affine, dw, db bool }{{false, false, false}, {true, true, true}, {true, true, false}, {true, false, true}} {
			w, wv := weights(c, t, g.affine, 0.5)
			dy, x, dyv, xv, mean, rstd := bwdInputs(t, c, true, wv, nil)
			dx := outFor(c, dy)
			var dw, db, ws *tu.Tensor
			var wantDW, wantDB []float64
			if g.affine {
				wantDW, wantDB = make([]float64, c.Cols()), make([]float64, c.Cols())
				ws = workspace(t, LayerNormBwdWorkspace, x)
			}
			if g.dw {
				dw = c.Backend.New(c.DT, []int64{int64(c.Cols())})
			}
			if g.db {
				db = c.Backend.New(c.DT, []int64{int64(c.Cols())})
			}
			require.NoError(t, LayerNormBwd(dy.Ptr(), x.Ptr(), ptr(w), mean.Ptr(), rstd.Ptr(), dx.Ptr(), ptr(dw), ptr(db), ptr(ws), nil), c)
			var want []float64
			ms, rs := mean.Values(), rstd.Values()
			dyRows := tu.Rows(dyv, c.Cols())
			for r, row := range tu.Rows(xv, c.Cols()) {
				want = append(want, RefLayerNormBwd(dyRows[r], row, wv, ms[r], rs[r], wantDW, wantDB)...)
			}
			tu.CloseScaled(t, c.String()+" dx", dx.Values(), want, 2*tu.Tol(c.DT), gradScale(dyv, rs))
			if g.dw {
				tu.CloseScaled(t, c.String()+" dweight", dw.Values(), wantDW, 2*tu.Tol(c.DT), sumScale(c, dyv, nil, nil))
			}
			if g.db {
				tu.CloseScaled(t, c.String()+" dbias", db.Values(), wantDB, 2*tu.Tol(c.DT), sumScale(c, dyv, nil, nil))
			}
		}
	})
}

// TestUnusedWorkspace: a workspace given without dweight or dbias is
// checked but neither written nor needed to be large: a one-element
// workspace stays poisoned and dx is right.
func TestUnusedWorkspace(t *testing.T) {
	tu.Cases(t, [][]int64{{3, 17}, {64, 96}, {2, 9001}}, func(t *testing.T, c tu.Case) {
		for _, layer := range []bool{false, true} {
			w, wv := weights(c, t, true, 0.5)
			dy, x, dyv, xv, mean, rstd := bwdInputs(t, c, layer, wv, nil)
			dx := outFor(c, dy)
			ws := c.Backend.New(core.F32, []int64{1}) // poisoned
			var err error
			if layer {
				err = LayerNormBwd(dy.Ptr(), x.Ptr(), w.Ptr(), mean.Ptr(), rstd.Ptr(), dx.Ptr(), nil, nil, ws.Ptr(), nil)
			} else {
				err = RMSNormBwd(dy.Ptr(), x.Ptr(), w.Ptr(), rstd.Ptr(), dx.Ptr(), nil, ws.Ptr(), nil)
			}
			require.NoError(t, err, c)
			require.True(t, math.IsNaN(ws.Values()[0]), "%v layer=%v: the workspace was written", c, layer)
			var want, ms []float64
			if layer {
				ms = mean.Values()
			}
			rs := rstd.Values()
			dyRows := tu.Rows(dyv, c.Cols())
			for r, row := range tu.Rows(xv, c.Cols()) {
				if layer {
					want = append(want, RefLayerNormBwd(dyRows[r], row, wv, ms[r], rs[r], nil, nil)...)
				} else {
					want = append(want, RefRMSNormBwd(dyRows[r], row, wv, rs[r], nil)...)
				}
			}
			tu.CloseScaled(t, c.String()+" dx", dx.Values(), want, 2*tu.Tol(c.DT), gradScale(dyv, rs))
		}
	})
}

// gradScale is the size of the terms dx cancels: rstd * |dy| (weights are
// near 1). Narrow rows make dx tiny against them (one column: exactly 0 up
// to eps), so the tolerance must follow the terms.
func gradScale(dy, rstd []float64) float64 {
	return tu.RMS(dy) * tu.RMS(rstd)
}

// sumScale is the size of a weight gradient's column sums before they
// cancel: sqrt(rows) terms of dy * x * rstd (x and rstd nil: of dy, or of
// dy * xhat). A sum that cancels to far below its terms carries their
// rounding, so its error is measured against this, not against itself.
func sumScale(c tu.Case, dy, x, rstd []float64) float64 {
	s := tu.RMS(dy) * math.Sqrt(float64(c.Rows()))
	if x != nil {
		s *= tu.RMS(x) * tu.RMS(rstd)
	}
	return s
}

// The weight and bias gradients are sums over rows, split across workers:
// the split must not depend on the thread count, so results are bit for
// bit the same with 1 thread and with many.
func TestThreadCountDeterminism(t *testing.T) {
	defer cpu.SetThreads(cpu.SetThreads(1))
	tu.ForEachISA(t, func(t *testing.T) {
		for _, dt := range tu.DTypes {
			for _, shape := range [][]int64{{3000, 64}, {517, 1031}, {64, 4096}} {
				c := tu.Case{Backend: tu.CPU, DT: dt, Shape: shape}
				w, wv := weights(c, t, true, 0.5)
				dy, x, _, _, mean, rstd := bwdInputs(t, c, true, wv, nil)
				var runs [][][]byte
				for _, threads := range []int{1, 2, 3, 8} {
					cpu.SetThreads(threads)
					dx := tu.New(dt, shape)
					dw, db := tu.New(dt, []int64{shape[1]}), tu.New(dt, []int64{shape[1]})
					rdx, rdw := tu.New(dt, shape), tu.New(dt, []int64{shape[1]})
					ws := workspace(t, LayerNormBwdWorkspace, x)
					require.NoError(t, LayerNormBwd(dy.Ptr(), x.Ptr(), w.Ptr(), mean.Ptr(), rstd.Ptr(), dx.Ptr(), dw.Ptr(), db.Ptr(), ws.Ptr(), nil))
					require.NoError(t, RMSNormBwd(dy.Ptr(), x.Ptr(), w.Ptr(), rstd.Ptr(), rdx.Ptr(), rdw.Ptr(), ws.Ptr(), nil))
					runs = append(runs, [][]byte{dx.Bytes(), dw.Bytes(), db.Bytes(), rdx.Bytes(), rdw.Bytes()})
				}
				for i, r := range runs[1:] {
					require.Equal(t, runs[0], r, "%s %v: %d threads differ from 1", dt, shape, []int{2, 3, 8}[i])
				}
			}
		}
	})
}
