package norm

import (
	"sync"
	"unsafe"

	"metalcore/backend/dialect"
	"metalcore/internal/core"
)

// normBwd is a backward pass per device type: dx, and the per-column
// gradients gs (dweight, and dbias for LayerNorm) through the workspace's
// partials; mean is nil for RMSNorm.
type normBwd func(b *bwdCall, mean, rstd *core.View, gs []*core.View, ws *core.View, enc unsafe.Pointer) error

var (
	rmsnormBwd   = core.NewDispatch[normBwd]("rmsnorm backward")
	layernormBwd = core.NewDispatch[normBwd]("layernorm backward")
	// normBwdPartials is the number of row blocks whose weight-gradient
	// partials the workspace holds (see partialBlocks).
	normBwdPartials = core.NewDispatch[func(x *core.View, perRow int, stream unsafe.Pointer) (int, error)]("norm backward workspace")
)

// maxPartials bounds the row blocks whose weight-gradient partials land in
// the workspace. The block split depends on the row count alone, so the
// reduction order, and with it dweight, is the same whatever the thread
// count.
const maxPartials = 32

// partialBlocks is the number of row blocks (and partial rows) for x, for
// `perRow` partial rows a block (1: RMSNorm, 2: LayerNorm), as x's device
// splits the rows. The split depends on the shape and the device alone, so
// dweight's summation order does too.
// stream is the one the kernel will run on (nil for a size query).
func partialBlocks(x *core.View, perRow int, stream unsafe.Pointer) (int, error) {
	f, err := normBwdPartials.For(x.DeviceType)
	if err != nil {
		return 0, err
	}
	return f(x, perRow, stream)
}

// workspaceBytes is the workspace for `perRow` float32 partial rows of
// width cols in each block.
func workspaceBytes(x *core.Tensor, perRow int) (int64, error) {
	c := core.NewCall()
	defer c.Free()
	xv := rowInput(c, "x", x)
	if err := c.DoneQuery(); err != nil {
		return 0, err
	}
	blocks, err := partialBlocks(xv, perRow, nil)
	return partialBytes(xv, perRow, blocks), err
}

// partialBytes is the size of `blocks` per-block partials, perRow rows of
// x's width per block, in float32.
func partialBytes(x *core.View, perRow, blocks int) int64 {
	return int64(blocks) * int64(perRow) * int64(x.Cols) * 4
}

// RMSNormBwdWorkspace is the workspace RMSNormBwd needs for dweight.
func RMSNormBwdWorkspace(x *core.Tensor) (int64, error) { return workspaceBytes(x, 1) }

// LayerNormBwdWorkspace is the workspace LayerNormBwd needs for dweight and dbias.
func LayerNormBwdWorkspace(x *core.Tensor) (int64, error) { return workspaceBytes(x, 2) }

// bwdCall validates what both backward passes share: dy and x alike, dx
// like x (may be dy), weight and its gradient per column, per-row stats.
type bwdCall struct {
	core.Call
	dy, x, w, dx *core.View
	partials     int // row blocks, when gradients of w are requested
}

// bwdCalls keeps bwdCalls between calls (see core.NewCall).
var bwdCalls = sync.Pool{New: func() any { return new(bwdCall) }}

// free empties b and returns it to the pool.
func (b *bwdCall) free() {
	*b = bwdCall{}
	bwdCalls.Put(b)
}

func newBwdCall(dy, x, weight, dx *core.Tensor) *bwdCall {
	b := bwdCalls.Get().(*bwdCall)
	b.dy = rowInput(&b.Call, "dy", dy)
	b.x = b.In("x", x)
	b.w = b.OptIn("weight", weight)
	b.dx = b.Out("dx", dx)
	b.Check(func() error { return core.LikeX(b.x, b.dy, b.dx) })
	b.Check(func() error { return core.PerColumn(b.x, b.w) })
	b.AllowInPlace(b.dx, b.dy)
	return b
}

func (b *bwdCall) stats(name string, t *core.Tensor) *core.View {
	v := b.In(name, t)
	b.Check(func() error { return core.RowStats(v, b.x) })
	return v
}

// grads registers the optional per-column gradients and the workspace they
// need (for the partials of a kernel on enc's stream); dweight requires
// weight.
func (b *bwdCall) grads(ws *core.Tensor, enc unsafe.Pointer, perRow int, names []string, ts ...*core.Tensor) ([]*core.View, *core.View) {
	gs := make([]*core.View, len(ts))
	want := false
	for i, t := range ts {
		gs[i] = b.OptOut(names[i], t)
		want = want || gs[i] != nil
	}
	if gs[0] != nil && b.w == nil {
		b.Fail(core.Errorf(core.ErrInvalidArgument, "%s is given but weight is NULL", names[0]))
	}
	b.Check(func() error { return core.PerColumn(b.x, gs...) })
	var need int64
	if want && b.x != nil {
		var err error
		b.partials, err = partialBlocks(b.x, perRow, enc)
		need = partialBytes(b.x, perRow, b.partials)
		b.Fail(err)
	}
	// a workspace given without gradients to sum is checked, then unused
	// (it may be smaller than the partials)
	wsv := b.Workspace("workspace", ws, need)
	if !want {
		wsv = nil
	}
	return gs, wsv
}

// RMSNormBwd: dx = rstd * (g - x * rstd^2 * mean(g * x)) with g = dy * w;
// dweight = sum over rows of dy * x * rstd.
func RMSNormBwd(dy, x, weight, rstd, dx, dweight, workspace *core.Tensor, enc unsafe.Pointer) error {
	b := newBwdCall(dy, x, weight, dx)
	defer b.free()
	rv := b.stats("rstd", rstd)
	gs, wsv := b.grads(workspace, enc, 1, []string{"dweight"}, dweight)
	f, err := core.Validated(&b.Call, enc, rmsnormBwd)
	if err != nil || b.x.N == 0 {
		return err
	}
	return f(b, nil, rv, gs, wsv, enc)
}

// LayerNormBwd: with xhat = (x - mean) * rstd and g = dy * w,
// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)); dweight = sum dy*xhat,
// dbias = sum dy.
func LayerNormBwd(dy, x, weight, mean, rstd, dx, dweight, dbias, workspace *core.Tensor, enc unsafe.Pointer) error {
	b := newBwdCall(dy, x, weight, dx)
	defer b.free()
	mv := b.stats("mean", mean)
	rv := b.stats("rstd", rstd)
	gs, wsv := b.grads(workspace, enc, 2, []string{"dweight", "dbias"}, dweight, dbias)
	f, err := core.Validated(&b.Call, enc, layernormBwd)
	if err != nil || b.x.N == 0 {
		return err
	}
	return f(b, mv, rv, gs, wsv, enc)
}

// bwdKernel is the backward kernel for x (ncol 1: RMSNorm, 2: LayerNorm)
// and its block size. It caches 16 elements a thread (as many 16-byte
// pieces as an element has bytes); rows of up to 256 threads take the
// variant fetching the next row ahead (measured on an H100: 1.3-1.6x faster
// there, up to 1.5x slower for 512-thread rows: its registers leave those
// blocks fewer threads than they need).
func bwdKernel(x *core.View, ncol int) (name string, threads int) {
	name = "rmsnorm_bwd"
	if ncol == 2 {
		name = "layernorm_bwd"
	}
	threads = dialect.RowThreads(x.Cols, x.DType, x.DType.Size())
	if threads <= 256 {
		name += "_ahead"
	}
	return dialect.Kernel(name, x.DType), threads
}
