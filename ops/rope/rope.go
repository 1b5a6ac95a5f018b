// Package rope is rotary position embedding in Hugging Face's rotate_half
// form: y = x·cos + rotate_half(x)·sin over the last dimension of
// x [B, H, T, D], cos and sin [B or 1, T, D] broadcast over the heads, and
// its backward (the transposed rotation): validation, one implementation
// per device type, the float64 reference in ref.go.
package rope

import (
	"unsafe"

	"metalcore/backend/dialect"
	"metalcore/internal/core"
)

// layout is what an implementation needs beyond the views: x's sizes, and
// the element strides of x's and y's batch, head and position dimensions
// and of cos/sin's batch (0 where broadcast) and position dimensions.
type layout struct {
	b, h, t, half      int
	xsb, xsh, xst      int64
	ysb, ysh, yst      int64
	csb, cst, ssb, sst int64
	backward           bool
}

// groupThreads is the GPU kernels' threads a block (fewer where a Metal
// pipeline takes fewer).
const groupThreads = 256

// work is the GPU kernels' rows (b, h, t) and threads: one a 16-byte piece
// of a row's first half (and the same piece of its second); it fails where
// they do not fit the kernels' 32-bit indices.
func (l *layout) work(dt core.DType) (rows, pieces int, err error) {
	n := 16 / dt.Size()
	rows = l.b * l.h * l.t
	pieces = rows * ((l.half + n - 1) / n)
	return rows, pieces, dialect.Fit32("x's rows, heads and pieces", rows, l.h, l.t, pieces+groupThreads)
}

var rope = core.NewDispatch[func(x, cos, sin, y *core.View, l *layout, enc unsafe.Pointer) error]("rope")

// Rope writes y = x·cos + rotate_half(x)·sin (rotate_half(x) = [−x₂, x₁]
// of x's halves x₁, x₂) or, with backward, the gradient of that for a
// gradient x: [x₁c₁ + x₂s₂, x₂c₂ − x₁s₁]. x: [B, H, T, D], D even, any
// strides with a unit last one (a transposed [B, T, H, D] as models make
// it); cos, sin: [B or 1, T, D] of x's dtype; y: x's shape and dtype, any
// strides with a unit last one (x's own layout, say) whose elements do not
// overlap, never sharing memory with x.
func Rope(x, cos, sin *core.Tensor, backward bool, y *core.Tensor, enc unsafe.Pointer) error {
	c := core.NewCall()
	defer c.Free()
	xv := c.In("x", x)
	cv := c.In("cos", cos)
	sv := c.In("sin", sin)
	yv := c.Out("y", y)
	var l layout
	c.Check(func() error { return core.LikeX(xv, yv) })
	c.Check(func() error { return core.SameDType(xv, cv, sv) })
	c.Check(func() error { return shapes(xv, cv, sv, yv, &l) })
	f, err := core.Validated(c, enc, rope)
	if err != nil || xv.N == 0 {
		return err
	}
	l.backward = backward
	return f(xv, cv, sv, yv, &l, enc)
}

func shapes(x, cos, sin, y *core.View, l *layout) error {
	if len(x.Shape) != 4 || x.Shape[3]%2 != 0 {
		return core.Errorf(core.ErrInvalidArgument, "x has shape %v; it must be [B, H, T, D] with D even", x.Shape)
	}
	for _, v := range []*core.View{cos, sin} {
		if len(v.Shape) != 3 || (v.Shape[0] != 1 && v.Shape[0] != x.Shape[0]) || v.Shape[1] != x.Shape[2] ||
			v.Shape[2] != x.Shape[3] {
			return core.Errorf(core.ErrInvalidArgument, "%s has shape %v; for x %v it must be [%d or 1, %d, %d]",
				v.Name, v.Shape, x.Shape, x.Shape[0], x.Shape[2], x.Shape[3])
		}
	}
	xs, ys, cs, ss := strides(x), strides(y), strides(cos), strides(sin)
	l.b, l.h, l.t, l.half = int(x.Shape[0]), int(x.Shape[1]), int(x.Shape[2]), int(x.Shape[3]/2)
	l.xsb, l.xsh, l.xst = xs[0], xs[1], xs[2]
	l.ysb, l.ysh, l.yst = ys[0], ys[1], ys[2]
	l.csb, l.cst, l.ssb, l.sst = cs[0], cs[1], ss[0], ss[1]
	if cos.Shape[0] == 1 {
		l.csb = 0
	}
	if sin.Shape[0] == 1 {
		l.ssb = 0
	}
	return nil
}

// strides are v's element strides (row-major where it has none).
func strides(v *core.View) []int64 {
	if v.Strides != nil {
		return v.Strides
	}
	s, step := make([]int64, len(v.Shape)), int64(1)
	for i := len(v.Shape) - 1; i >= 0; i-- {
		s[i] = step
		step *= v.Shape[i]
	}
	return s
}
