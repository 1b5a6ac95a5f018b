// Package svd is the batched thin singular value decomposition of
// [..., m, n] matrices by one-sided Jacobi rotations: validation and
// dispatch to one implementation per device type, the float64 reference in
// ref.go.
//
// Every implementation works on B, the matrix itself when it is tall
// (m >= n) and its transpose when it is wide: rows = max(m, n) and
// cols = min(m, n) = k. Rotating pairs of B's columns until every two are
// orthogonal gives B V = W, so B = (W / ‖W‖) diag(‖W‖) Vᵀ: the singular
// values are W's column norms, the left vectors W's normalized columns,
// the right ones V's. For a wide matrix the two sides trade places.
package svd

import (
	"unsafe"

	"metalcore/internal/core"
)

// shapes are a's batch and m x n, and whether the singular vectors are
// wanted.
type shapes struct {
	batch, m, n int
	vectors     bool
}

// rows and cols are B's: the longer side and the shorter.
func (s shapes) rows() int { return max(s.m, s.n) }
func (s shapes) cols() int { return min(s.m, s.n) }

var decompose = core.NewDispatch[func(s shapes, a, u, sv, vh, info *core.View, enc unsafe.Pointer) error]("svd")

// MaxSweeps bounds the sweeps over every pair of columns: a float32 matrix
// converges in about 6 to 10; one that has not after MaxSweeps is reported
// in info.
const MaxSweeps = 40

// SVD decomposes every A of a [..., m, n] as A = U diag(s) Vh, thin
// (k = min(m, n)): s [..., k] the singular values in descending order,
// u [..., m, k] and vh [..., k, n] (both, or both nil for the values only)
// with orthonormal columns and rows. A rank-deficient A's U and Vh stay
// orthonormal: the columns of a zero singular value complete the others'.
// info [...] (int32) is 0 where the rotations converged, and 1 where A
// holds a NaN or an infinity (its s, u and vh are then NaN) or they did
// not converge within MaxSweeps sweeps. a, u, s and vh: float32, float16
// or bfloat16, one dtype (computed in float32), contiguous, never
// overlapping.
func SVD(a, u, s, vh, info *core.Tensor, enc unsafe.Pointer) error {
	c := core.NewCall()
	defer c.Free()
	av := c.In("a", a)
	uv := c.OptOut("u", u)
	sv := c.Out("s", s)
	vv := c.OptOut("vh", vh)
	iv := c.Info("info", info)
	var sh shapes
	c.Check(func() (err error) { sh, err = inputShapes(av, uv, vv); return })
	batchWith := func(dims ...int) []int64 {
		out := append([]int64(nil), av.Shape[:max(len(av.Shape)-2, 0)]...)
		for _, d := range dims {
			out = append(out, int64(d))
		}
		return out
	}
	c.Check(func() error { return core.WantShape(sv, batchWith(sh.cols()), "a's batch dimensions and min(m, n)") })
	c.Check(func() error {
		return core.WantShape(uv, batchWith(sh.m, sh.cols()), "a's batch dimensions, m and min(m, n)")
	})
	c.Check(func() error {
		return core.WantShape(vv, batchWith(sh.cols(), sh.n), "a's batch dimensions, min(m, n) and n")
	})
	c.Check(func() error { return core.SameDType(av, sv) })
	c.Check(func() error {
		if uv == nil {
			return nil
		}
		return core.SameDType(av, uv, vv)
	})
	c.Check(func() error { return core.WantContiguous(av, uv, sv, vv, iv) })
	c.Check(func() error { return core.WantBatchInfo(av, iv, sh.batch) })
	f, err := core.Validated(c, enc, decompose)
	if err != nil || sh.batch == 0 {
		return err
	}
	return f(sh, av, uv, sv, vv, iv, enc)
}

func inputShapes(a, u, vh *core.View) (shapes, error) {
	nd := len(a.Shape)
	if nd < 2 {
		return shapes{}, core.Errorf(core.ErrInvalidArgument, "a has shape %v; svd needs matrices [..., m, n]", a.Shape)
	}
	if (u == nil) != (vh == nil) {
		return shapes{}, core.Errorf(core.ErrInvalidArgument, "u and vh come together: both, or neither for the "+
			"singular values only")
	}
	s := shapes{batch: 1, m: int(a.Shape[nd-2]), n: int(a.Shape[nd-1]), vectors: u != nil}
	for _, d := range a.Shape[:nd-2] {
		s.batch *= int(d)
	}
	return s, nil
}
