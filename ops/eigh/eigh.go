// Package eigh is the batched symmetric eigendecomposition of [..., n, n]
// matrices, by Jacobi rotations on the GPUs and for small batched matrices
// on the CPU, by tridiagonal reduction and QL iterations for the rest:
// validation and dispatch to one implementation per device type, the
// float64 reference in ref.go.
package eigh

import (
	"unsafe"

	"metalcore/internal/core"
)

// shapes are a's batch and order, which triangle is read, and whether the
// eigenvectors are wanted.
type shapes struct {
	batch, n       int
	upper, vectors bool
}

var decompose = core.NewDispatch[func(s shapes, a, w, v, info *core.View, enc unsafe.Pointer) error]("eigh")

// MaxSweeps bounds the Jacobi sweeps over a matrix: a float32 matrix
// converges in about 6 to 10; one that has not after MaxSweeps (a NaN or an
// infinity in it) is reported in info.
const MaxSweeps = 40

// Eigh decomposes every symmetric A of a [..., n, n] as A = V diag(w) Vᵀ,
// reading A's lower triangle (its upper one with upper): w [..., n] the
// eigenvalues in ascending order, v (optional, nil for eigenvalues only)
// [..., n, n] the orthonormal eigenvectors in its columns. info [...]
// (int32) is 0 where the method converged, and 1 where A holds a NaN
// or an infinity (its w and v are then NaN) or it did not converge
// (MaxSweeps Jacobi sweeps, or tridiag.MaxQLIterations for an eigenvalue). a, w and v:
// float32, float16 or bfloat16, one dtype (computed in float32),
// contiguous, never overlapping.
func Eigh(a *core.Tensor, upper bool, w, v, info *core.Tensor, enc unsafe.Pointer) error {
	c := core.NewCall()
	defer c.Free()
	av := c.In("a", a)
	wv := c.Out("w", w)
	vv := c.OptOut("v", v)
	iv := c.Info("info", info)
	var s shapes
	c.Check(func() (err error) { s, err = inputShapes(av, upper, vv != nil); return })
	c.Check(func() error {
		return core.WantShape(wv, av.Shape[:len(av.Shape)-1], "a's shape without its last dimension")
	})
	c.Check(func() error { return core.SameDType(av, wv) })
	c.Check(func() error { return core.LikeX(av, vv) })
	c.Check(func() error { return core.WantContiguous(av, wv, vv, iv) })
	c.Check(func() error { return core.WantBatchInfo(av, iv, s.batch) })
	f, err := core.Validated(c, enc, decompose)
	if err != nil || s.batch == 0 {
		return err
	}
	return f(s, av, wv, vv, iv, enc)
}

func inputShapes(a *core.View, upper, vectors bool) (shapes, error) {
	nd := len(a.Shape)
	if nd < 2 || a.Shape[nd-1] != a.Shape[nd-2] {
		return shapes{}, core.Errorf(core.ErrInvalidArgument, "a has shape %v; eigh needs square matrices [..., n, n]",
			a.Shape)
	}
	s := shapes{batch: 1, n: int(a.Shape[nd-1]), upper: upper, vectors: vectors}
	for _, d := range a.Shape[:nd-2] {
		s.batch *= int(d)
	}
	return s, nil
}
