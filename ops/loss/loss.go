// Package loss is cross-entropy over the last dimension with integer class
// targets: each row's loss and, in the same pass, the gradient of the
// loss with respect to the row's logits (validation, dispatch to one
// implementation per device type, the float64 reference in ref.go).
package loss

import (
	"math"
	"unsafe"

	"metalcore/internal/core"
)

// args is one call's scalars.
type args struct {
	ignore    int64
	smoothing float32
}

var crossEntropy = core.NewDispatch[func(x, target, scale, loss, grad *core.View, a args, enc unsafe.Pointer) error]("cross-entropy")

// CrossEntropy computes, for each row r of logits x (rows = every index but
// the last; V = the last dimension) with class target t = target[r]:
//
//	loss[r]    = (1-s)·(lse_r − x[r,t]) + s·(lse_r − mean_j x[r,j])
//	grad[r, j] = scale · (softmax(x_r)_j − (1−s)·[j = t] − s/V)
//
// with s = smoothing (PyTorch's label_smoothing) and lse_r the row's
// log-sum-exp. A row whose target is ignore loses 0 and gets a zero
// gradient. target: int64, one per row (shaped as x without its last
// dimension, or [rows]); loss: float32, likewise; grad (optional): x's
// shape and dtype, and may be x itself; scale (optional): float32, one for
// every row or one per row, read on the device (1 when absent), so that a
// mean's 1/count or the loss's own gradient needs no host read. A target outside [0, V) that is not ignore is refused on the
// CPU before anything is written; a GPU cannot read it without waiting, so
// there the row's loss and gradient are NaN.
func CrossEntropy(x, target *core.Tensor, ignore int64, smoothing float32, scale, loss, grad *core.Tensor, enc unsafe.Pointer) error {
	c := core.NewCall()
	defer c.Free()
	xv := c.In("logits", x)
	tv := c.Index("target", target)
	sv := c.OptIn("scale", scale)
	lv := c.Out("loss", loss)
	gv := c.OptOut("dlogits", grad)
	c.Check(func() error { return core.WantRows(xv) })
	c.Check(func() error { return perRow(xv, tv) })
	c.Check(func() error { return perRow(xv, lv) })
	c.Check(func() error { return core.WantDType(lv, core.F32) })
	c.Check(func() error {
		if sv == nil {
			return nil
		}
		if err := core.WantDType(sv, core.F32); err != nil {
			return err
		}
		if sv.N != 1 && (sv.N != xv.Rows || !sv.Contiguous) {
			return core.Errorf(core.ErrInvalidArgument, "scale has %d elements; it must have 1, or one per row "+
				"(%d), contiguous", sv.N, xv.Rows)
		}
		return nil
	})
	c.Check(func() error { return core.LikeX(xv, gv) })
	c.Check(func() error {
		if !(smoothing >= 0 && smoothing <= 1) || math.IsInf(float64(smoothing), 0) {
			return core.Errorf(core.ErrInvalidArgument, "label_smoothing is %g; it must be in [0, 1]", smoothing)
		}
		return nil
	})
	c.AllowInPlace(gv, xv)
	f, err := core.Validated(c, enc, crossEntropy)
	if err != nil || xv.Rows == 0 {
		return err
	}
	return f(xv, tv, sv, lv, gv, args{ignore, smoothing}, enc)
}

// perRow requires v to hold one contiguous value per row of x: shaped as x
// without its last dimension, or 1-D.
func perRow(x, v *core.View) error {
	if !v.Contiguous {
		return core.Errorf(core.ErrUnsupportedLayout, "%s must be contiguous", v.Name)
	}
	if v.N != x.Rows || (len(v.Shape) != 1 && len(v.Shape) != len(x.Shape)-1) {
		return core.Errorf(core.ErrInvalidArgument, "%s has shape %v; it needs one value per row of %s %v",
			v.Name, v.Shape, x.Name, x.Shape)
	}
	return nil
}
