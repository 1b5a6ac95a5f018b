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

// args is one call's scalars, and how it uses the rows' log-sum-exp.
type args struct {
	ignore    int64
	smoothing float32
	stats     stats
}

// stats says what a call does with lse, one float32 a row: nothing, write
// it beside the loss (a forward), or read it instead of the first pass over
// the logits (a backward).
type stats int32

const (
	noStats stats = iota
	writeStats
	readStats
)

var (
	crossEntropy = core.NewDispatch[func(x, target, scale, loss, grad, lse *core.View, a args, enc unsafe.Pointer) error]("cross-entropy")
	gradScale    = core.NewDispatch[func(g, scale *core.View, enc unsafe.Pointer) error]("loss gradient scale")
)

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
// mean's 1/count or the loss's own gradient needs no host read. A target
// outside [0, V) that is not ignore is refused on the CPU before anything
// is written; a GPU cannot read it without waiting, so there the row's loss
// and gradient are NaN.
func CrossEntropy(x, target *core.Tensor, ignore int64, smoothing float32, scale, loss, grad *core.Tensor, enc unsafe.Pointer) error {
	return crossEntropyCall(x, target, scale, loss, grad, nil, args{ignore, smoothing, noStats}, enc)
}

// CrossEntropyForward is CrossEntropy's loss from one read of the logits,
// and each row's log-sum-exp in lse (float32, one per row as loss is; 0 for
// an ignored row, NaN where the loss is), for CrossEntropyBackward.
func CrossEntropyForward(x, target *core.Tensor, ignore int64, smoothing float32, loss, lse *core.Tensor, enc unsafe.Pointer) error {
	return crossEntropyCall(x, target, nil, loss, nil, lse, args{ignore, smoothing, writeStats}, enc)
}

// CrossEntropyBackward is CrossEntropy's gradient from the log-sum-exp
// CrossEntropyForward gave for the same logits: one read of the logits and
// one write of grad, which may be x itself.
func CrossEntropyBackward(x, target, lse *core.Tensor, ignore int64, smoothing float32, scale, grad *core.Tensor, enc unsafe.Pointer) error {
	return crossEntropyCall(x, target, scale, nil, grad, lse, args{ignore, smoothing, readStats}, enc)
}

// crossEntropyCall checks and runs one of the three: loss is absent only
// when lse is read, grad only when it is not.
func crossEntropyCall(x, target, scale, loss, grad, lse *core.Tensor, a args, enc unsafe.Pointer) error {
	c := core.NewCall()
	defer c.Free()
	xv := c.In("logits", x)
	tv := c.Index("target", target)
	var sv, lv, gv, sev *core.View
	switch a.stats {
	case noStats:
		sv, lv, gv = c.OptIn("scale", scale), c.Out("loss", loss), c.OptOut("dlogits", grad)
	case writeStats:
		lv, sev = c.Out("loss", loss), c.Out("lse", lse)
	case readStats:
		sev, sv, gv = c.In("lse", lse), c.OptIn("scale", scale), c.Out("dlogits", grad)
	}
	c.Check(func() error { return core.WantRows(xv) })
	c.Check(func() error { return perRow(xv, tv) })
	for _, v := range []*core.View{lv, sev} {
		if v != nil {
			c.Check(func() error { return perRow(xv, v) })
			c.Check(func() error { return core.WantDType(v, core.F32) })
		}
	}
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
		if !(a.smoothing >= 0 && a.smoothing <= 1) || math.IsInf(float64(a.smoothing), 0) {
			return core.Errorf(core.ErrInvalidArgument, "label_smoothing is %g; it must be in [0, 1]", a.smoothing)
		}
		return nil
	})
	c.AllowInPlace(gv, xv)
	f, err := core.Validated(c, enc, crossEntropy)
	if err != nil || xv.Rows == 0 {
		return err
	}
	return f(xv, tv, sv, lv, gv, sev, a, enc)
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

// ScaleGradient multiplies grad (contiguous) in place by scale (one float32,
// read on the device) and writes nothing where scale is 1. A host that
// computed a scalar loss's gradient in its forward (CrossEntropy with grad)
// scales it by the loss's own gradient in its backward: for the usual
// loss.backward() that gradient is 1, and the backward costs a launch, not a
// pass over the logits, without the host reading the value.
func ScaleGradient(grad, scale *core.Tensor, enc unsafe.Pointer) error {
	c := core.NewCall()
	defer c.Free()
	gv, sv := c.Out("grad", grad), c.In("scale", scale)
	c.Check(func() error { return core.WantContiguous(gv) })
	c.Check(func() error {
		if err := core.WantDType(sv, core.F32); err != nil {
			return err
		}
		if sv.N != 1 {
			return core.Errorf(core.ErrInvalidArgument, "scale has %d elements; it must have 1", sv.N)
		}
		return nil
	})
	f, err := core.Validated(c, enc, gradScale)
	if err != nil || gv.N == 0 {
		return err
	}
	return f(gv, sv, enc)
}

// ScaleGradient's grid on a GPU: blocks of scaleThreads over 16-byte pieces, at
// most about a full GPU's worth, each block looping (so that a scale of 1,
// where every block returns at once, costs little more than the launch).
const scaleThreads = 256

func scaleBlocks(n int) int { return min((n/8+scaleThreads)/scaleThreads, 1024) }
