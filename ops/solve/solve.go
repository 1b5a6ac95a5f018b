// Package solve is batched solution of square linear systems A X = B by
// Gaussian elimination with partial pivoting (LU, as LAPACK's gesv):
// validation and dispatch to one implementation per device type, the
// float64 reference in ref.go.
package solve

import (
	"unsafe"

	"metalcore/internal/core"
)

// shapes are the batch, the order n of A and the columns k of B.
type shapes struct{ batch, n, k int }

var solve = core.NewDispatch[func(s shapes, a, b, x, info *core.View, enc unsafe.Pointer) error]("solve")

// Solve solves A X = B for every matrix A of a [..., n, n] and its right-hand
// sides b [..., n, k], writing x (b's shape; it may be b itself) and info
// [...] (int32): 0 where A was factored, j > 0 where the j-th pivot was
// zero (A singular, as LAPACK's getrf says), and there x is NaN. a, b and x:
// float32, float16 or bfloat16, one dtype (computed in float32), contiguous;
// a is read only. A NaN in A or B gives NaN in x, never a hang.
func Solve(a, b, x, info *core.Tensor, enc unsafe.Pointer) error {
	c := core.NewCall()
	defer c.Free()
	av, bv := c.In("a", a), c.In("b", b)
	xv := c.Out("x", x)
	iv := c.Info("info", info)
	var s shapes
	c.Check(func() (err error) { s, err = inputShapes(av, bv); return })
	c.Check(func() error { return core.SameDType(av, bv) })
	c.Check(func() error { return core.LikeX(bv, xv) })
	c.Check(func() error { return core.WantContiguous(av, bv, xv, iv) })
	c.Check(func() error { return core.WantBatchInfo(av, iv, s.batch) })
	c.AllowInPlace(xv, bv)
	f, err := core.Validated(c, enc, solve)
	if err != nil || s.batch == 0 {
		return err
	}
	return f(s, av, bv, xv, iv, enc)
}

func inputShapes(a, b *core.View) (shapes, error) {
	nd := len(a.Shape)
	if nd < 2 || a.Shape[nd-1] != a.Shape[nd-2] {
		return shapes{}, core.Errorf(core.ErrInvalidArgument, "a has shape %v; solve needs square matrices [..., n, n]",
			a.Shape)
	}
	if len(b.Shape) != nd || b.Shape[nd-2] != a.Shape[nd-1] || !sameBatch(a.Shape, b.Shape) {
		return shapes{}, core.Errorf(core.ErrInvalidArgument, "b has shape %v; for a %v it needs [..., %d, k] with a's "+
			"batch dimensions", b.Shape, a.Shape, a.Shape[nd-1])
	}
	s := shapes{batch: 1, n: int(a.Shape[nd-1]), k: int(b.Shape[nd-1])}
	for _, d := range a.Shape[:nd-2] {
		s.batch *= int(d)
	}
	return s, nil
}

func sameBatch(a, b []int64) bool {
	for i := range a[:len(a)-2] {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
