package norm

import (
	_ "embed"
	"unsafe"

	"metalcore/backend/cuda"
	"metalcore/backend/dialect"
	"metalcore/internal/core"
)

//go:embed norm.cu
var kernels string

func init() {
	cuda.Register(kernels)
	rmsnormFwd.Register(core.DeviceCUDA, rmsnormFwdCUDA)
	fusedAddRMSNormFwd.Register(core.DeviceCUDA, fusedAddRMSNormFwdCUDA)
	layernormFwd.Register(core.DeviceCUDA, layernormFwdCUDA)
	rmsnormBwd.Register(core.DeviceCUDA, normBwdCUDA)
	layernormBwd.Register(core.DeviceCUDA, normBwdCUDA)
	normBwdPartials.Register(core.DeviceCUDA, partialBlocksCUDA)
}

// partialBlocksCUDA: no more than the multiprocessors hold at once (a
// second wave would leave them half idle at its end, and doubles the
// partials), at most eight per multiprocessor, fewer for wide rows so that
// the partials stay small against the tensor (measured on an H100 for
// 4096x8192, whose 512-thread blocks fit one a multiprocessor: one wave
// instead of two 1.04-1.13x faster).
func partialBlocksCUDA(x *core.View, perRow int, stream unsafe.Pointer) (int, error) {
	dev := int(x.DeviceID)
	sms, err := cuda.SMs(dev)
	if err != nil {
		return 0, cuda.Backend(err)
	}
	wide := 16 * sms * 1024 / max(x.Cols, 1)
	name, threads := bwdKernel(x, perRow)
	wave, err := cuda.Wave(dev, stream, name, threads)
	return min(x.Rows, wave, 8*sms, max(sms, wide)), cuda.Backend(err)
}

// maxAheadWarpRow is the largest row, in bytes, that RMSNorm's forward
// runs with the ahead kernel (cuda.RowsAhead) where a row takes one warp;
// past it, up to the 2 KB a warp holds, a block a row is faster: the
// prefetched row's registers halve the blocks a multiprocessor holds, and
// RMSNorm, the lightest of the row kernels, gains less from the overlap than
// it loses there (bench/python_ops.md; LayerNorm's and softmax's forwards
// were faster ahead at every width).
const maxAheadWarpRow = 1536

func rmsnormFwdCUDA(x, w, _, y, _, rstd *core.View, eps float32, enc unsafe.Pointer) error {
	st, err := dialect.RowStrides(x, y)
	if err != nil {
		return err
	}
	dev, threads := int(x.DeviceID), dialect.RowThreads(x.Cols, x.DType, 4)
	name, blocks := dialect.Kernel("rmsnorm_fwd", x.DType), x.Rows
	if !(threads == 32 && x.Cols*x.DType.Size() > maxAheadWarpRow) {
		if name, blocks, err = cuda.RowsAhead(dev, enc, "rmsnorm_fwd", x.DType, x.Rows, threads); err != nil {
			return cuda.Backend(err)
		}
	}
	return cuda.Backend(cuda.Launch(dev, enc, name, blocks, threads, cuda.Ptr(x.Base), cuda.I64(st[0]), cuda.View(w),
		cuda.Ptr(y.Base), cuda.I64(st[1]), cuda.View(rstd), cuda.I32(x.Rows), cuda.I32(x.Cols), cuda.F32(eps)))
}

func fusedAddRMSNormFwdCUDA(x, res, w, y, ro, rstd *core.View, eps float32, enc unsafe.Pointer) error {
	st, err := dialect.RowStrides(x, res, y, ro)
	if err != nil {
		return err
	}
	return cuda.Backend(cuda.Launch(int(x.DeviceID), enc, dialect.Kernel("fused_add_rmsnorm_fwd", x.DType), x.Rows, dialect.RowThreads(x.Cols, x.DType, 4),
		cuda.Ptr(x.Base), cuda.I64(st[0]), cuda.Ptr(res.Base), cuda.I64(st[1]), cuda.View(w), cuda.Ptr(y.Base), cuda.I64(st[2]),
		cuda.Ptr(ro.Base), cuda.I64(st[3]), cuda.View(rstd), cuda.I32(x.Cols), cuda.F32(eps)))
}

func layernormFwdCUDA(x, w, b, y, mean, rstd *core.View, eps float32, enc unsafe.Pointer) error {
	st, err := dialect.RowStrides(x, y)
	if err != nil {
		return err
	}
	dev, threads := int(x.DeviceID), dialect.RowThreads(x.Cols, x.DType, 4)
	name, blocks, err := cuda.RowsAhead(dev, enc, "layernorm_fwd", x.DType, x.Rows, threads)
	if err != nil {
		return cuda.Backend(err)
	}
	return cuda.Backend(cuda.Launch(dev, enc, name, blocks, threads, cuda.Ptr(x.Base), cuda.I64(st[0]), cuda.View(w),
		cuda.View(b), cuda.Ptr(y.Base), cuda.I64(st[1]), cuda.View(mean), cuda.View(rstd), cuda.I32(x.Rows),
		cuda.I32(x.Cols), cuda.F32(eps)))
}

// normBwdCUDA runs the backward kernel (rmsnorm_bwd or layernorm_bwd) and,
// when gradients are requested, sums the partials of the workspace into
// them. mean is nil for RMSNorm.
func normBwdCUDA(b *bwdCall, mean, rstd *core.View, gs []*core.View, ws *core.View, enc unsafe.Pointer) error {
	st, err := dialect.RowStrides(b.dy, b.x, b.dx)
	if err != nil {
		return err
	}
	x, dev := b.x, int(b.x.DeviceID)
	ncol := 1
	if mean != nil {
		ncol = 2
	}
	name, threads := bwdKernel(x, ncol)
	blocks := x.Rows
	if ws != nil {
		blocks = b.partials
	}
	args := []uint64{cuda.Ptr(b.dy.Base), cuda.I64(st[0]), cuda.Ptr(x.Base), cuda.I64(st[1]), cuda.View(b.w), cuda.View(mean),
		cuda.View(rstd), cuda.Ptr(b.dx.Base), cuda.I64(st[2]), cuda.View(ws), cuda.I32(x.Rows), cuda.I32(x.Cols)}
	if err := cuda.Launch(dev, enc, name, blocks, threads, args...); err != nil || ws == nil {
		return cuda.Backend(err)
	}
	// one launch sums every gradient's partials (column_sum)
	outs := [2]uint64{cuda.View(gs[0]), 0}
	if len(gs) > 1 {
		outs[1] = cuda.View(gs[1])
	}
	return cuda.Backend(cuda.Launch(dev, enc, dialect.Kernel("column_sum", x.DType), (x.Cols+31)/32*len(gs), 256,
		cuda.Ptr(ws.Base), cuda.I32(blocks), cuda.I64(int64(ncol*x.Cols)), cuda.I32(x.Cols), outs[0], outs[1]))
}
