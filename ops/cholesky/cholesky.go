// Package cholesky is batched Cholesky factorization of symmetric
// positive-definite [..., n, n] matrices: validation and dispatch to one
// implementation per device type, the float64 reference in ref.go.
package cholesky

import (
	"unsafe"

	"metalcore/internal/core"
)

// shapes are a's batch and order, and which triangle is read and written.
type shapes struct {
	batch, n int
	upper    bool
}

var factor = core.NewDispatch[func(s shapes, a, l, info *core.View, enc unsafe.Pointer) error]("cholesky")

// maxCUDAOrder is the largest n the CUDA kernels take (a matrix in the
// block's shared memory as float32: 64 KB at 128; Metal's threadgroup
// memory holds up to maxMetalOrder); larger ones are ErrUnsupportedLayout
// there.
const maxCUDAOrder = 128

// Cholesky factors every matrix A of a [..., n, n]: l = L, lower
// triangular with a positive diagonal and A = L Lᵀ, reading A's lower
// triangle only; with upper, l = U = Lᵀ, A = Uᵀ U, reading the upper
// triangle. The other triangle of l is zero. info [...] (int32) is 0 for a
// matrix that factored and k > 0 where the leading minor of order k is not
// positive-definite (or holds a NaN), as LAPACK's potrf says; there l's
// columns (rows, with upper) from k - 1 on are unspecified. a and l:
// float32, float16 or bfloat16, one dtype (computed in float32),
// contiguous, l never a itself.
func Cholesky(a *core.Tensor, upper bool, l, info *core.Tensor, enc unsafe.Pointer) error {
	c := core.NewCall()
	defer c.Free()
	av := c.In("a", a)
	lv := c.Out("l", l)
	iv := c.Info("info", info)
	var s shapes
	c.Check(func() (err error) { s, err = inputShapes(av, upper); return })
	c.Check(func() error { return core.LikeX(av, lv) })
	c.Check(func() error { return core.WantContiguous(av, lv, iv) })
	c.Check(func() error { return core.WantBatchInfo(av, iv, s.batch) })
	f, err := core.Validated(c, enc, factor)
	if err != nil || s.batch == 0 {
		return err
	}
	return f(s, av, lv, iv, enc)
}

func inputShapes(a *core.View, upper bool) (shapes, error) {
	nd := len(a.Shape)
	if nd < 2 || a.Shape[nd-1] != a.Shape[nd-2] {
		return shapes{}, core.Errorf(core.ErrInvalidArgument, "a has shape %v; Cholesky needs square matrices [..., n, n]",
			a.Shape)
	}
	s := shapes{batch: 1, n: int(a.Shape[nd-1]), upper: upper}
	for _, d := range a.Shape[:nd-2] {
		s.batch *= int(d)
	}
	return s, nil
}
