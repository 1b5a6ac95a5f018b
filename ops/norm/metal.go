package norm

import (
	"unsafe"

	"metalcore/backend/dialect"
	"metalcore/backend/metal"
	"metalcore/internal/core"
)

func init() {
	metal.Register("norm", kernels)
	rmsnormFwd.Register(core.DeviceMetal, rmsnormFwdMetal)
	fusedAddRMSNormFwd.Register(core.DeviceMetal, fusedAddRMSNormFwdMetal)
	layernormFwd.Register(core.DeviceMetal, layernormFwdMetal)
	rmsnormBwd.Register(core.DeviceMetal, normBwdMetal)
	layernormBwd.Register(core.DeviceMetal, normBwdMetal)
	normBwdPartials.Register(core.DeviceMetal, partialBlocksMetal)
}

// metalPartials bounds the backward's row blocks on Metal, whose devices
// report no core count: a fixed split (so dweight's summation order depends
// on the shape alone), enough threadgroups for the largest Apple GPUs.
const metalPartials = 128

func partialBlocksMetal(x *core.View, _ int, _ unsafe.Pointer) (int, error) {
	return min(x.Rows, metalPartials), nil
}

// rowFwdMetal encodes a forward row kernel, a threadgroup a row (Metal
// reports no occupancy to size the CUDA backend's row-ahead grids by).
func rowFwdMetal(name string, x *core.View, enc unsafe.Pointer, args func(st []int64) []metal.Arg, vs ...*core.View) error {
	st, err := dialect.RowStrides(vs...)
	if err != nil {
		return err
	}
	p, err := metal.NewPlan(enc)
	if err != nil {
		return err
	}
	kernel := dialect.Kernel(name, x.DType)
	p.Dispatch(kernel, x.Rows, p.Threads(kernel, dialect.RowThreads(x.Cols, x.DType, 4)), args(st)...)
	return p.Encode()
}

func rmsnormFwdMetal(x, w, _, y, _, rstd *core.View, eps float32, enc unsafe.Pointer) error {
	return rowFwdMetal("rmsnorm_fwd", x, enc, func(st []int64) []metal.Arg {
		return []metal.Arg{metal.Buf(x), metal.I64(st[0]), metal.Buf(w), metal.Buf(y), metal.I64(st[1]), metal.Buf(rstd),
			metal.I32(x.Rows), metal.I32(x.Cols), metal.F32(eps)}
	}, x, y)
}

func fusedAddRMSNormFwdMetal(x, res, w, y, ro, rstd *core.View, eps float32, enc unsafe.Pointer) error {
	return rowFwdMetal("fused_add_rmsnorm_fwd", x, enc, func(st []int64) []metal.Arg {
		return []metal.Arg{metal.Buf(x), metal.I64(st[0]), metal.Buf(res), metal.I64(st[1]), metal.Buf(w), metal.Buf(y),
			metal.I64(st[2]), metal.Buf(ro), metal.I64(st[3]), metal.Buf(rstd), metal.I32(x.Cols), metal.F32(eps)}
	}, x, res, y, ro)
}

func layernormFwdMetal(x, w, b, y, mean, rstd *core.View, eps float32, enc unsafe.Pointer) error {
	return rowFwdMetal("layernorm_fwd", x, enc, func(st []int64) []metal.Arg {
		return []metal.Arg{metal.Buf(x), metal.I64(st[0]), metal.Buf(w), metal.Buf(b), metal.Buf(y), metal.I64(st[1]),
			metal.Buf(mean), metal.Buf(rstd), metal.I32(x.Rows), metal.I32(x.Cols), metal.F32(eps)}
	}, x, y)
}

// normBwdMetal encodes the backward kernel and, when gradients are
// requested, the column sums of the workspace's partials into them (after
// a barrier: they read what the first dispatch wrote).
func normBwdMetal(b *bwdCall, mean, rstd *core.View, gs []*core.View, ws *core.View, enc unsafe.Pointer) error {
	st, err := dialect.RowStrides(b.dy, b.x, b.dx)
	if err != nil {
		return err
	}
	p, err := metal.NewPlan(enc)
	if err != nil {
		return err
	}
	x := b.x
	ncol := 1
	if mean != nil {
		ncol = 2
	}
	name, threads := bwdKernel(x, ncol)
	blocks, partials := x.Rows, metal.Buf(nil)
	if ws != nil {
		blocks = b.partials
		partials = metal.BufAt(ws, 0, partialBytes(x, ncol, blocks))
	}
	p.Dispatch(name, blocks, p.Threads(name, threads), metal.Buf(b.dy), metal.I64(st[0]), metal.Buf(x), metal.I64(st[1]),
		metal.Buf(b.w), metal.Buf(mean), metal.Buf(rstd), metal.Buf(b.dx), metal.I64(st[2]), partials, metal.I32(x.Rows),
		metal.I32(x.Cols))
	if ws != nil { // one dispatch sums every gradient's partials (column_sum)
		outs := [2]metal.Arg{metal.Buf(gs[0]), metal.Buf(nil)}
		if len(gs) > 1 {
			outs[1] = metal.Buf(gs[1])
		}
		sum := dialect.Kernel("column_sum", x.DType)
		p.Dispatch(sum, (x.Cols+31)/32*len(gs), p.Threads(sum, 256), partials, metal.I32(blocks),
			metal.I64(int64(ncol*x.Cols)), metal.I32(x.Cols), outs[0], outs[1])
	}
	return p.Encode()
}
