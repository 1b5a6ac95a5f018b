package rope

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"metalcore/internal/core"
	tu "metalcore/tests/testutil"
)

// permuted makes a [B, H, T, D] view of a [B, T, H, D] tensor (as models
// make q and k with transpose(1, 2)), filled with vals in [B, H, T, D] order.
func permuted(b tu.Backend, dt core.DType, shape []int64, vals []float64) *tu.Tensor {
	bb, h, t, d := shape[0], shape[1], shape[2], shape[3]
	src := b.New(dt, []int64{bb, t, h, d})
	raw := make([]float64, len(vals))
	for i0 := range bb {
		for i1 := range h {
			for i2 := range t {
				for i3 := range d {
					raw[((i0*t+i2)*h+i1)*d+i3] = vals[((i0*h+i1)*t+i2)*d+i3]
				}
			}
		}
	}
	src.Set(raw)
	// the same tensor (its device memory is freed with it) seen as the view
	src.Shape = append([]int64(nil), shape...)
	src.Strides = []int64{t * h * d, d, h * d, 1}
	src.T.Shape, src.T.Strides = &src.Shape[0], &src.Strides[0]
	return src
}

func TestRope(t *testing.T) {
	tu.ForEachBackend(t, func(t *testing.T, b tu.Backend) {
		rng := tu.RNG(t)
		for _, dt := range tu.DTypes {
			for _, shape := range [][]int64{{1, 1, 1, 2}, {2, 3, 5, 8}, {2, 4, 7, 64}, {1, 2, 3, 130}, {3, 2, 9, 128}} {
				for _, layout := range []string{"contiguous", "transposed", "transposed in and out", "broadcast cos"} {
					for _, backward := range []bool{false, true} {
						n := int(shape[0] * shape[1] * shape[2] * shape[3])
						xs := make([]float64, n)
						for i := range xs {
							xs[i] = tu.Round(dt, rng.NormFloat64())
						}
						var x *tu.Tensor
						if layout == "transposed" || layout == "transposed in and out" {
							x = permuted(b, dt, shape, xs)
						} else {
							x = b.New(dt, shape).Set(xs)
						}
						cb := shape[0]
						if layout == "broadcast cos" {
							cb = 1
						}
						cshape := []int64{cb, shape[2], shape[3]}
						c, s := b.New(dt, cshape), b.New(dt, cshape)
						cs, ss := c.Rand(rng, 1), s.Rand(rng, 1)
						y := b.New(dt, shape)
						if layout == "transposed in and out" { // y in x's layout, NaN first
							nan := make([]float64, n)
							for i := range nan {
								nan[i] = math.NaN()
							}
							y = permuted(b, dt, shape, nan)
						}
						require.NoError(t, Rope(x.Ptr(), c.Ptr(), s.Ptr(), backward, y.Ptr(), nil))
						d, rowsPerB := int(shape[3]), int(shape[1]*shape[2])
						var want []float64
						for r := range n / d {
							bi, ti := r/rowsPerB, r%int(shape[2])
							if cb == 1 {
								bi = 0
							}
							off := (bi*int(shape[2]) + ti) * d
							want = append(want, RefRope(xs[r*d:(r+1)*d], cs[off:off+d], ss[off:off+d], backward)...)
						}
						tu.CloseScaled(t, b.Name+" "+dt.String()+" "+layout, y.Values(), want, tu.Tol(dt), 1)
					}
				}
			}
		}
	})
}

func TestRopeRefusals(t *testing.T) {
	x, y := tu.New(core.F32, []int64{2, 3, 4, 8}), tu.New(core.F32, []int64{2, 3, 4, 8})
	c, s := tu.New(core.F32, []int64{2, 4, 8}), tu.New(core.F32, []int64{2, 4, 8})
	for name, args := range map[string][4]*tu.Tensor{
		"odd D":              {tu.New(core.F32, []int64{2, 3, 4, 7}), tu.New(core.F32, []int64{2, 4, 7}), tu.New(core.F32, []int64{2, 4, 7}), tu.New(core.F32, []int64{2, 3, 4, 7})},
		"3-d x":              {tu.New(core.F32, []int64{3, 4, 8}), c, s, tu.New(core.F32, []int64{3, 4, 8})},
		"cos of 3 batches":   {x, tu.New(core.F32, []int64{3, 4, 8}), s, y},
		"sin of 5 positions": {x, c, tu.New(core.F32, []int64{2, 5, 8}), y},
	} {
		require.Equal(t, core.ErrInvalidArgument, tu.Status(t, Rope(args[0].Ptr(), args[1].Ptr(), args[2].Ptr(), false, args[3].Ptr(), nil)), name)
	}
	require.Equal(t, core.ErrUnsupportedDType, tu.Status(t, Rope(x.Ptr(), tu.New(core.BF16, []int64{2, 4, 8}).Ptr(), s.Ptr(), false, y.Ptr(), nil)))
	require.Equal(t, core.ErrInvalidArgument, tu.Status(t, Rope(x.Ptr(), c.Ptr(), s.Ptr(), false, x.Ptr(), nil)), "in place")
	// a y whose heads share memory (stride 0) would have rows written twice
	overlapping := tu.New(core.F32, []int64{2, 3, 4, 8})
	overlapping.Strides = []int64{32, 0, 8, 1}
	overlapping.T.Strides = &overlapping.Strides[0]
	before := overlapping.Bytes()
	require.Equal(t, core.ErrInvalidArgument, tu.Status(t, Rope(x.Ptr(), c.Ptr(), s.Ptr(), false, overlapping.Ptr(), nil)),
		"overlapping y")
	require.Equal(t, before, overlapping.Bytes(), "overlapping y: something was written")
}
