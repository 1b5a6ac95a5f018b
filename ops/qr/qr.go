// Package qr is batched Householder QR of a [..., m, n]: validation and
// dispatch to one implementation per device type (cpu.go and blocked.go,
// cuda.go).
package qr

import (
	"unsafe"

	"metalcore/internal/core"
)

var (
	// factorize computes q (nil in mode ROnly) and r of every matrix of a
	factorize = core.NewDispatch[func(s shapes, a, q, r, ws *core.View, enc unsafe.Pointer) error]("qr")
	// workspaceSize is the workspace in bytes for s on device dev
	workspaceSize = core.NewDispatch[func(s shapes, mode int32, dev int) (int64, error)]("qr workspace")
)

// Modes, as the header's MC_QR_*.
const (
	Reduced  = 0 // q [..., m, k], r [..., k, n]
	Complete = 1 // q [..., m, m], r [..., m, n]
	ROnly    = 2 // q NULL, r [..., k, n]
)

// shapes are what a and mode ask for.
type shapes struct {
	batch, m, n, k, qCols, rRows int
}

func (s shapes) rShape(a *core.View) []int64 {
	return append(append([]int64(nil), a.Shape[:len(a.Shape)-2]...), int64(s.rRows), int64(s.n))
}

func (s shapes) qShape(a *core.View) []int64 {
	return append(append([]int64(nil), a.Shape[:len(a.Shape)-2]...), int64(s.m), int64(s.qCols))
}

func inputShapes(a *core.View, mode int32) (shapes, error) {
	var s shapes
	if len(a.Shape) < 2 {
		return s, core.Errorf(core.ErrInvalidArgument, "a has %d dimensions; QR needs [..., m, n]", len(a.Shape))
	}
	if mode < Reduced || mode > ROnly {
		return s, core.Errorf(core.ErrInvalidArgument, "mode is %d; it must be 0 (reduced), 1 (complete) or 2 (r)", mode)
	}
	nd := len(a.Shape)
	s.m, s.n = int(a.Shape[nd-2]), int(a.Shape[nd-1])
	s.k = min(s.m, s.n)
	s.batch = 1
	for _, d := range a.Shape[:nd-2] {
		s.batch *= int(d)
	}
	s.qCols, s.rRows = s.k, s.k
	if mode == Complete {
		s.qCols, s.rRows = s.m, s.m
	}
	return s, nil
}

func wantShape(v *core.View, want []int64) error {
	if len(v.Shape) != len(want) {
		return core.Errorf(core.ErrInvalidArgument, "%s has shape %v, want %v", v.Name, v.Shape, want)
	}
	for i := range want {
		if v.Shape[i] != want[i] {
			return core.Errorf(core.ErrInvalidArgument, "%s has shape %v, want %v", v.Name, v.Shape, want)
		}
	}
	return nil
}

// WorkspaceSize is the workspace mc_qr needs: none on the CPU (each worker
// keeps its matrix in its own scratch) nor for CUDA matrices up to 128
// wide; float32 copies of the matrices (and of q) for larger CUDA ones.
func WorkspaceSize(a *core.Tensor, mode int32) (int64, error) {
	c := core.NewCall()
	defer c.Free()
	av := c.In("a", a)
	var s shapes
	c.Check(func() (err error) { s, err = inputShapes(av, mode); return })
	if err := c.DoneQuery(); err != nil {
		return 0, err
	}
	return workspaceBytes(av, s, mode)
}

func workspaceBytes(av *core.View, s shapes, mode int32) (int64, error) {
	f, err := workspaceSize.For(av.DeviceType)
	if err != nil {
		return 0, err
	}
	return f(s, mode, int(av.DeviceID))
}

// QR factors every matrix of a: a = q r, q with orthonormal columns, r upper
// triangular (LAPACK's signs: r's diagonal may be negative).
func QR(a *core.Tensor, mode int32, q, r, workspace *core.Tensor, enc unsafe.Pointer) error {
	c := core.NewCall()
	defer c.Free()
	av := c.In("a", a)
	var s shapes
	c.Check(func() (err error) { s, err = inputShapes(av, mode); return })
	var qv *core.View
	if mode == ROnly {
		if q != nil {
			c.Fail(core.Errorf(core.ErrInvalidArgument, "q must be NULL in mode 2 (r only)"))
		}
	} else {
		qv = c.Out("q", q)
	}
	rv := c.Out("r", r)
	var need int64
	c.Check(func() (err error) { need, err = workspaceBytes(av, s, mode); return })
	ws := c.Workspace("workspace", workspace, need)
	c.Check(func() error {
		if qv != nil {
			if err := wantShape(qv, s.qShape(av)); err != nil {
				return err
			}
		}
		return wantShape(rv, s.rShape(av))
	})
	c.Check(func() error { return core.SameDType(av, rv) })
	c.Check(func() error {
		if qv == nil {
			return nil
		}
		return core.SameDType(av, qv)
	})
	c.Check(func() error { return core.WantContiguous(av, qv, rv) })
	f, err := core.Validated(c, enc, factorize)
	if err != nil {
		return err
	}
	if s.batch == 0 || s.m == 0 || (s.k == 0 && mode != Complete) {
		return nil // every output is empty; complete mode's q of an m x 0 matrix is the identity
	}
	return f(s, av, qv, rv, ws, enc)
}
