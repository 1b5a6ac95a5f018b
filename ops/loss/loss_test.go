package loss

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"metalcore/internal/core"
	tu "metalcore/tests/testutil"
)

const ignore = -100

// targets for rows of width cols: random classes, every fifth row ignored
// (and every row, for allIgnored), the last class somewhere.
func targets(rng interface{ IntN(int) int }, rows, cols int, allIgnored bool) []float64 {
	t := make([]float64, rows)
	for r := range t {
		t[r] = float64(rng.IntN(cols))
		if r%5 == 3 || allIgnored {
			t[r] = ignore
		}
	}
	if rows > 1 && !allIgnored {
		t[0] = float64(cols - 1)
	}
	return t
}

func TestCrossEntropy(t *testing.T) {
	tu.Cases(t, tu.Shapes, func(t *testing.T, c tu.Case) {
		rng := tu.RNG(t)
		for _, smoothing := range []float64{0, 0.1} {
			for _, scaling := range []string{"none", "one", "per row"} {
				x := c.New(c.Shape, 0)
				xs := x.Rand(rng, 3)
				rowShape := c.Shape[:len(c.Shape)-1]
				tt := c.Backend.New(core.I64, rowShape).Set(targets(rng, c.Rows(), c.Cols(), false))
				loss := c.Backend.New(core.F32, rowShape)
				g := x
				if !c.InPlace {
					g = c.New(c.Shape, 0)
				}
				var scale *core.Tensor
				scales := make([]float64, c.Rows())
				for r := range scales {
					scales[r] = 1
					switch scaling {
					case "one":
						scales[r] = 0.25
					case "per row":
						scales[r] = rng.Float64() * 2
					}
				}
				switch scaling {
				case "one":
					scale = c.Backend.New(core.F32, []int64{1}).Set(scales[:1]).Ptr()
				case "per row":
					scale = c.Backend.New(core.F32, rowShape).Set(scales).Ptr()
				}
				var wantLoss, wantGrad []float64
				for r, row := range tu.Rows(xs, c.Cols()) {
					target := int(tt.Values()[r])
					if target == ignore {
						wantLoss = append(wantLoss, 0)
						wantGrad = append(wantGrad, make([]float64, len(row))...)
						continue
					}
					l, gr := RefCrossEntropy(row, target, smoothing, tu.Round(core.F32, scales[r]))
					wantLoss, wantGrad = append(wantLoss, l), append(wantGrad, gr...)
				}
				// in one call, and split: the loss and lse, then the gradient
				// from lse (into poisoned outputs; in place, x again first)
				for _, split := range []bool{false, true} {
					what := fmt.Sprintf("%v split %v", c, split)
					if !split {
						require.NoError(t, CrossEntropy(x.Ptr(), tt.Ptr(), ignore, float32(smoothing), scale, loss.Ptr(),
							g.Ptr(), nil), what)
					} else {
						lse := c.Backend.New(core.F32, rowShape)
						x.Set(xs)
						loss.Poison()
						if !c.InPlace {
							g.Poison()
						}
						require.NoError(t, CrossEntropyForward(x.Ptr(), tt.Ptr(), ignore, float32(smoothing), loss.Ptr(),
							lse.Ptr(), nil), what)
						require.NoError(t, CrossEntropyBackward(x.Ptr(), tt.Ptr(), lse.Ptr(), ignore, float32(smoothing),
							scale, g.Ptr(), nil), what)
					}
					// a loss is lse − x[t], each about the logits' size: float32's
					// rounding of them is its error, whatever the difference
					tu.CloseScaled(t, what+" loss", loss.Values(), wantLoss, 2e-5, 1+maxAbs(xs))
					closeGrad(t, what+" "+scaling+" dlogits", g.Values(), wantGrad, xs, tt.Values(), scales, tu.Tol(c.DT), c.Cols())
					require.True(t, g.PaddingPoisoned(), "%v: wrote outside dlogits' elements", what)
				}
			}
		}
	})
}

// closeGrad compares a gradient of rows of cols logits xs with the reference
// as tu.CloseScaled does (tol times the value plus 2/cols), and a row's
// target entry within a further term: float32's rounding of the row's
// log-sum-exp (a few units of its last place) is every probability's
// relative error, and where the target's probability is near 1 its
// gradient, scale (p - 1), cancels down to that error times the row's scale.
func closeGrad(t *testing.T, what string, got, want, xs, targets, scales []float64, tol float64, cols int) {
	t.Helper()
	bad := 0
	for r, row := range tu.Rows(xs, cols) {
		slack := 8 * 0x1p-24 * (1 + math.Abs(refLogSumExp(row))) * math.Abs(scales[r])
		for j := range row {
			i, allowed := r*cols+j, tol*(math.Abs(want[r*cols+j])+2/float64(cols))
			if j == int(targets[r]) {
				allowed += slack
			}
			if !(math.Abs(got[i]-want[i]) <= allowed) {
				if bad < 5 {
					t.Errorf("%s[%d] = %g, want %g (allowed %g)", what, i, got[i], want[i], allowed)
				}
				bad++
			}
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d of %d values out of tolerance", what, bad, len(got))
	}
}

// Vocabulary-wide rows, whose pieces a GPU keeps in registers, then in
// shared memory, then re-reads (past 151936 bfloat16 on CUDA): loss and
// gradient, apart and in place, against float64.
func TestCrossEntropyWideRows(t *testing.T) {
	tu.ForEachBackend(t, func(t *testing.T, b tu.Backend) {
		rng := tu.RNG(t)
		for _, dt := range tu.DTypes {
			for _, cols := range []int{32003, 128256, 151937} {
				rows := 2
				x := b.New(dt, []int64{int64(rows), int64(cols)})
				xs := x.Rand(rng, 4)
				tt := b.New(core.I64, []int64{int64(rows)}).Set(targets(rng, rows, cols, false))
				var wantLoss, wantGrad []float64
				for r, row := range tu.Rows(xs, cols) { // two rows: targets ignores none
					l, g := RefCrossEntropy(row, int(tt.Values()[r]), 0.1, 1)
					wantLoss, wantGrad = append(wantLoss, l), append(wantGrad, g...)
				}
				for _, inPlace := range []bool{false, true} {
					what := fmt.Sprintf("%v %d in place %v", dt, cols, inPlace)
					loss, g := b.New(core.F32, []int64{int64(rows)}), x
					if !inPlace {
						g = b.New(dt, []int64{int64(rows), int64(cols)})
					}
					require.NoError(t, CrossEntropy(x.Ptr(), tt.Ptr(), ignore, 0.1, nil, loss.Ptr(), g.Ptr(), nil), what)
					tu.CloseScaled(t, what+" loss", loss.Values(), wantLoss, 2e-5, 1+maxAbs(xs))
					// float16's gradients here are subnormal: its smallest step bounds their error
					tu.CloseScaled(t, what+" dlogits", g.Values(), wantGrad, tu.Tol(dt), max(2/float64(cols), 0x1p-24/tu.Tol(dt)))
				}
			}
		}
	})
}

// Without dlogits, the loss alone; with every row ignored, zeros.
func TestCrossEntropyLossOnlyAndAllIgnored(t *testing.T) {
	tu.ForEachBackend(t, func(t *testing.T, b tu.Backend) {
		rng := tu.RNG(t)
		for _, dt := range tu.DTypes {
			x := b.New(dt, []int64{6, 33})
			xs := x.Rand(rng, 2)
			tt := b.New(core.I64, []int64{6}).Set(targets(rng, 6, 33, false))
			loss := b.New(core.F32, []int64{6})
			require.NoError(t, CrossEntropy(x.Ptr(), tt.Ptr(), ignore, 0, nil, loss.Ptr(), nil, nil))
			for r, row := range tu.Rows(xs, 33) {
				want := 0.0
				if target := int(tt.Values()[r]); target != ignore {
					want, _ = RefCrossEntropy(row, target, 0, 1)
				}
				require.InDelta(t, want, loss.Values()[r], 2e-5*(math.Abs(want)+1), "%v row %d", dt, r)
			}
			tt.Set(targets(rng, 6, 33, true))
			g, lse := b.New(dt, []int64{6, 33}), b.New(core.F32, []int64{6})
			require.NoError(t, CrossEntropy(x.Ptr(), tt.Ptr(), ignore, 0.2, nil, loss.Ptr(), g.Ptr(), nil))
			for _, v := range append(loss.Values(), g.Values()...) {
				require.Zero(t, v, "%v: an ignored row", dt)
			}
			loss.Poison()
			g.Poison()
			require.NoError(t, CrossEntropyForward(x.Ptr(), tt.Ptr(), ignore, 0.2, loss.Ptr(), lse.Ptr(), nil))
			require.NoError(t, CrossEntropyBackward(x.Ptr(), tt.Ptr(), lse.Ptr(), ignore, 0.2, nil, g.Ptr(), nil))
			for _, v := range append(append(loss.Values(), lse.Values()...), g.Values()...) {
				require.Zero(t, v, "%v: an ignored row, split", dt)
			}
		}
	})
}

// A row holding a NaN or +inf, or all -inf, is NaN in loss and gradient.
func TestCrossEntropyNonFiniteRows(t *testing.T) {
	tu.ForEachBackend(t, func(t *testing.T, b tu.Backend) {
		for _, dt := range tu.DTypes {
			const cols = 9
			xs := make([]float64, 3*cols)
			for i := range cols {
				xs[i], xs[cols+i], xs[2*cols+i] = float64(i), float64(i), math.Inf(-1)
			}
			xs[4], xs[cols+2] = math.NaN(), math.Inf(1)
			x := b.New(dt, []int64{3, cols}).Set(xs)
			tt := b.New(core.I64, []int64{3}).Set([]float64{1, 2, 3})
			loss, g := b.New(core.F32, []int64{3}), b.New(dt, []int64{3, cols})
			require.NoError(t, CrossEntropy(x.Ptr(), tt.Ptr(), ignore, 0, nil, loss.Ptr(), g.Ptr(), nil))
			for i, v := range append(loss.Values(), g.Values()...) {
				require.True(t, math.IsNaN(v), "%v [%d] = %g, want NaN", dt, i, v)
			}
			lse, g2 := b.New(core.F32, []int64{3}), b.New(dt, []int64{3, cols})
			require.NoError(t, CrossEntropyForward(x.Ptr(), tt.Ptr(), ignore, 0, loss.Ptr(), lse.Ptr(), nil))
			require.NoError(t, CrossEntropyBackward(x.Ptr(), tt.Ptr(), lse.Ptr(), ignore, 0, nil, g2.Ptr(), nil))
			for i, v := range append(append(loss.Values(), lse.Values()...), g2.Values()...) {
				require.True(t, math.IsNaN(v), "%v split [%d] = %g, want NaN", dt, i, v)
			}
		}
	})
}

// Bad calls are refused and write nothing.
func TestCrossEntropyRefusals(t *testing.T) {
	x := tu.New(core.F32, []int64{4, 10})
	x.Rand(tu.RNG(t), 1)
	good := func() (*tu.Tensor, *tu.Tensor, *tu.Tensor) {
		return tu.New(core.I64, []int64{4}).Set([]float64{0, 9, ignore, 3}), tu.New(core.F32, []int64{4}),
			tu.New(core.F32, []int64{4, 10})
	}
	cases := []struct {
		name   string
		mutate func(tt, loss, g **tu.Tensor, smoothing *float32, scale **tu.Tensor)
		status core.Status
	}{
		{"target past V", func(tt, _, _ **tu.Tensor, _ *float32, _ **tu.Tensor) {
			(*tt).Set([]float64{0, 10, 1, 2})
		}, core.ErrInvalidArgument},
		{"negative target", func(tt, _, _ **tu.Tensor, _ *float32, _ **tu.Tensor) {
			(*tt).Set([]float64{0, -1, 1, 2})
		}, core.ErrInvalidArgument},
		{"float target", func(tt, _, _ **tu.Tensor, _ *float32, _ **tu.Tensor) {
			*tt = tu.New(core.F32, []int64{4})
		}, core.ErrUnsupportedDType},
		{"target per column", func(tt, _, _ **tu.Tensor, _ *float32, _ **tu.Tensor) {
			*tt = tu.New(core.I64, []int64{10}).Set(make([]float64, 10))
		}, core.ErrInvalidArgument},
		{"16-bit loss", func(_, loss, _ **tu.Tensor, _ *float32, _ **tu.Tensor) {
			*loss = tu.New(core.BF16, []int64{4})
		}, core.ErrUnsupportedDType},
		{"dlogits of another shape", func(_, _, g **tu.Tensor, _ *float32, _ **tu.Tensor) {
			*g = tu.New(core.F32, []int64{4, 9})
		}, core.ErrInvalidArgument},
		{"dlogits of another dtype", func(_, _, g **tu.Tensor, _ *float32, _ **tu.Tensor) {
			*g = tu.New(core.F16, []int64{4, 10})
		}, core.ErrUnsupportedDType},
		{"NaN smoothing", func(_, _, _ **tu.Tensor, s *float32, _ **tu.Tensor) {
			*s = float32(math.NaN())
		}, core.ErrInvalidArgument},
		{"smoothing above 1", func(_, _, _ **tu.Tensor, s *float32, _ **tu.Tensor) { *s = 1.5 }, core.ErrInvalidArgument},
		{"scale of two", func(_, _, _ **tu.Tensor, _ *float32, scale **tu.Tensor) {
			*scale = tu.New(core.F32, []int64{2})
		}, core.ErrInvalidArgument},
	}
	for _, k := range cases {
		tt, loss, g := good()
		var scale *tu.Tensor
		smoothing := float32(0)
		k.mutate(&tt, &loss, &g, &smoothing, &scale)
		before := [][]byte{loss.Bytes(), g.Bytes()}
		var sp *core.Tensor
		if scale != nil {
			sp = scale.Ptr()
		}
		err := CrossEntropy(x.Ptr(), tt.Ptr(), ignore, smoothing, sp, loss.Ptr(), g.Ptr(), nil)
		require.Equal(t, k.status, tu.Status(t, err), k.name)
		require.Equal(t, before, [][]byte{loss.Bytes(), g.Bytes()}, "%s: something was written", k.name)
	}
}

// The split's own refusals: lse of another dtype or length, or absent; a
// backward without dlogits; a target out of range on the CPU. Nothing is
// written.
func TestCrossEntropySplitRefusals(t *testing.T) {
	x := tu.New(core.F32, []int64{4, 10})
	x.Rand(tu.RNG(t), 1)
	tt := tu.New(core.I64, []int64{4}).Set([]float64{0, 9, ignore, 3})
	bad := tu.New(core.I64, []int64{4}).Set([]float64{0, 10, ignore, 3})
	loss, lse, g := tu.New(core.F32, []int64{4}), tu.New(core.F32, []int64{4}), tu.New(core.F32, []int64{4, 10})
	cases := []struct {
		name   string
		call   func() error
		status core.Status
	}{
		{"forward, 16-bit lse", func() error {
			return CrossEntropyForward(x.Ptr(), tt.Ptr(), ignore, 0, loss.Ptr(), tu.New(core.BF16, []int64{4}).Ptr(), nil)
		}, core.ErrUnsupportedDType},
		{"forward, lse of 3", func() error {
			return CrossEntropyForward(x.Ptr(), tt.Ptr(), ignore, 0, loss.Ptr(), tu.New(core.F32, []int64{3}).Ptr(), nil)
		}, core.ErrInvalidArgument},
		{"forward, no lse", func() error {
			return CrossEntropyForward(x.Ptr(), tt.Ptr(), ignore, 0, loss.Ptr(), nil, nil)
		}, core.ErrInvalidArgument},
		{"forward, target past V", func() error {
			return CrossEntropyForward(x.Ptr(), bad.Ptr(), ignore, 0, loss.Ptr(), lse.Ptr(), nil)
		}, core.ErrInvalidArgument},
		{"backward, no lse", func() error {
			return CrossEntropyBackward(x.Ptr(), tt.Ptr(), nil, ignore, 0, nil, g.Ptr(), nil)
		}, core.ErrInvalidArgument},
		{"backward, no dlogits", func() error {
			return CrossEntropyBackward(x.Ptr(), tt.Ptr(), lse.Ptr(), ignore, 0, nil, nil, nil)
		}, core.ErrInvalidArgument},
		{"backward, target past V", func() error {
			return CrossEntropyBackward(x.Ptr(), bad.Ptr(), lse.Ptr(), ignore, 0, nil, g.Ptr(), nil)
		}, core.ErrInvalidArgument},
	}
	for _, k := range cases {
		before := [][]byte{loss.Bytes(), lse.Bytes(), g.Bytes()}
		require.Equal(t, k.status, tu.Status(t, k.call()), k.name)
		require.Equal(t, before, [][]byte{loss.Bytes(), lse.Bytes(), g.Bytes()}, "%s: something was written", k.name)
	}
}

func maxAbs(v []float64) float64 {
	m := 0.0
	for _, x := range v {
		m = math.Max(m, math.Abs(x))
	}
	return m
}

// ScaleGradient multiplies in place, in the gradient's dtype; a scale of 1
// leaves every byte as it was (the kernel writes nothing); a strided
// gradient is refused.
func TestScaleGradient(t *testing.T) {
	tu.Cases(t, tu.Shapes, func(t *testing.T, c tu.Case) {
		if c.InPlace {
			return // in place by definition: one run a layout
		}
		rng := tu.RNG(t)
		for _, s := range []float64{1, 0.37, -2} {
			g := c.New(c.Shape, 0)
			gs := g.Rand(rng, 3)
			scale := c.Backend.New(core.F32, []int64{1}).Set([]float64{s})
			before := g.Bytes()
			err := ScaleGradient(g.Ptr(), scale.Ptr(), nil)
			if c.NonContiguous() {
				require.Equal(t, core.ErrUnsupportedLayout, tu.Status(t, err), "%v", c)
				require.Equal(t, before, g.Bytes(), "%v: written though refused", c)
				continue
			}
			require.NoError(t, err, "%v", c)
			if s == 1 {
				require.Equal(t, before, g.Bytes(), "%v: a scale of 1 wrote", c)
				continue
			}
			want := make([]float64, len(gs))
			for i, v := range gs {
				want[i] = v * tu.Round(core.F32, s)
			}
			tu.CloseScaled(t, fmt.Sprintf("%v scale %g", c, s), g.Values(), want, tu.Tol(c.DT), 3*math.Abs(s))
			require.True(t, g.PaddingPoisoned(), "%v: wrote outside the gradient's elements", c)
		}
	})
}

func TestScaleGradientRefusals(t *testing.T) {
	g := tu.New(core.F32, []int64{4, 10})
	g.Rand(tu.RNG(t), 1)
	for _, k := range []struct {
		name   string
		scale  *tu.Tensor
		status core.Status
	}{
		{"scale of two", tu.New(core.F32, []int64{2}).Set([]float64{2, 2}), core.ErrInvalidArgument},
		{"16-bit scale", tu.New(core.BF16, []int64{1}).Set([]float64{2}), core.ErrUnsupportedDType},
		{"no scale", nil, core.ErrInvalidArgument},
	} {
		before := g.Bytes()
		var sp *core.Tensor
		if k.scale != nil {
			sp = k.scale.Ptr()
		}
		require.Equal(t, k.status, tu.Status(t, ScaleGradient(g.Ptr(), sp, nil)), k.name)
		require.Equal(t, before, g.Bytes(), "%s: something was written", k.name)
	}
}
