package activation

import (
	"unsafe"

	"metalcore/backend/cpu"
	"metalcore/backend/cpu/simd"
	"metalcore/internal/core"
)

// The gated activations (the MLP of Llama-style models), as in the header.
const (
	SwiGLU    = 0 // silu(gate) * up
	GeGLU     = 1 // gelu(gate) * up, erf form
	GeGLUTanh = 2 // gelu(gate) * up, tanh form
)

// gluPass is one gated activation: its CUDA kernels' names and its CPU
// primitives.
type gluPass struct {
	fwdKernel, bwdKernel string
	act                  func(*simd.Table) func(dst, x []float32)
	grad                 func(*simd.Table) func(dst, dy, x []float32)
}

var gluPasses = [3]gluPass{
	SwiGLU:    {"swiglu_fwd", "swiglu_bwd", siluFwd.pick, siluBwd.pick},
	GeGLU:     {"geglu_fwd", "geglu_bwd", geluFwd[GeluErf].pick, geluBwd[GeluErf].pick},
	GeGLUTanh: {"geglu_tanh_fwd", "geglu_tanh_bwd", geluFwd[GeluTanh].pick, geluBwd[GeluTanh].pick},
}

var (
	gluFwd = core.NewDispatch[func(gate, up, y *core.View, p *gluPass, enc unsafe.Pointer) error]("gated activation forward")
	gluBwd = core.NewDispatch[func(dy, gate, up, dgate, dup *core.View, p *gluPass, enc unsafe.Pointer) error]("gated activation backward")
)

func gluPassOf(kind int32) (*gluPass, error) {
	if kind < 0 || int(kind) >= len(gluPasses) {
		return nil, core.Errorf(core.ErrInvalidArgument, "kind is %d; it must be 0 (SwiGLU), 1 (GeGLU) or 2 (GeGLU, tanh form)", kind)
	}
	return &gluPasses[kind], nil
}

// GluFwd: y = act(gate) * up elementwise, every tensor of one shape and
// dtype, contiguous; y may be gate or up.
func GluFwd(gate, up *core.Tensor, kind int32, y *core.Tensor, enc unsafe.Pointer) error {
	p, err := gluPassOf(kind)
	if err != nil {
		return err
	}
	c := core.NewCall()
	defer c.Free()
	gv := c.In("gate", gate)
	uv := c.In("up", up)
	yv := c.Out("y", y)
	c.Check(func() error { return core.LikeX(gv, uv, yv) })
	c.Check(func() error { return core.WantContiguous(gv, uv, yv) })
	c.AllowInPlace(yv, gv)
	c.AllowInPlace(yv, uv)
	f, err := core.Validated(c, enc, gluFwd)
	if err != nil || gv.N == 0 {
		return err
	}
	return f(gv, uv, yv, p, enc)
}

// GluBwd: dgate = dy * up * act'(gate), dup = dy * act(gate), every tensor
// of one shape and dtype, contiguous; dgate may be gate, dup may be up.
func GluBwd(dy, gate, up *core.Tensor, kind int32, dgate, dup *core.Tensor, enc unsafe.Pointer) error {
	p, err := gluPassOf(kind)
	if err != nil {
		return err
	}
	c := core.NewCall()
	defer c.Free()
	dyv := c.In("dy", dy)
	gv := c.In("gate", gate)
	uv := c.In("up", up)
	dgv := c.Out("dgate", dgate)
	duv := c.Out("dup", dup)
	c.Check(func() error { return core.LikeX(gv, dyv, uv, dgv, duv) })
	c.Check(func() error { return core.WantContiguous(dyv, gv, uv, dgv, duv) })
	c.AllowInPlace(dgv, gv)
	c.AllowInPlace(duv, uv)
	f, err := core.Validated(c, enc, gluBwd)
	if err != nil || gv.N == 0 {
		return err
	}
	return f(dyv, gv, uv, dgv, duv, p, enc)
}

func init() {
	gluFwd.Register(core.DeviceCPU, gluFwdCPU)
	gluBwd.Register(core.DeviceCPU, gluBwdCPU)
}

// Scratch slots of the gated passes past elementwise's three.
const (
	bufAct  = iota + bufOut + 1 // act(gate)
	bufDyUp                     // dy * up
	bufDup                      // dup's chunk
)

// gluFwdCPU: act(gate) into scratch, then times up, so that y may be up.
func gluFwdCPU(gv, uv, yv *core.View, p *gluPass, _ unsafe.Pointer) error {
	k := cpu.K()
	act, mul := p.act(k), k.Mul
	elementwise(yv, gv, uv, func(o, a, b cpu.Span, off, m int, s *cpu.Scratch) {
		dst, t := o.Out(off, s.Buf(bufOut, m)), s.Buf(bufAct, m)
		act(t, a.Load(off, s.Buf(bufA, m)))
		mul(dst, t, b.Load(off, s.Buf(bufB, m)))
		o.Store(off, dst)
	})
	return nil
}

// gluBwdCPU: dy * up and act(gate) first, then dup (which may be up) and
// dgate (which may be gate), chunk by chunk.
func gluBwdCPU(dyv, gv, uv, dgv, duv *core.View, p *gluPass, _ unsafe.Pointer) error {
	n := gv.N
	cpu.Parallel((n+cpu.Chunk-1)/cpu.Chunk, cpu.RowGrain(cpu.Chunk), func(lo, hi int, s *cpu.Scratch) {
		k := cpu.K()
		act, grad := p.act(k), p.grad(k)
		dyS, gS, uS, dgS, duS := cpu.TensorSpan(dyv), cpu.TensorSpan(gv), cpu.TensorSpan(uv), cpu.TensorSpan(dgv),
			cpu.TensorSpan(duv)
		for i := lo; i < hi; i++ {
			off := i * cpu.Chunk
			m := min(cpu.Chunk, n-off)
			dy, g := dyS.Load(off, s.Buf(bufA, m)), gS.Load(off, s.Buf(bufB, m))
			dyUp, a := s.Buf(bufDyUp, m), s.Buf(bufAct, m)
			k.Mul(dyUp, dy, uS.Load(off, s.Buf(bufOut, m)))
			act(a, g)
			du := duS.Out(off, s.Buf(bufDup, m))
			k.Mul(du, a, dy)
			duS.Store(off, du)
			dg := dgS.Out(off, s.Buf(bufOut, m))
			grad(dg, dyUp, g)
			dgS.Store(off, dg)
		}
	})
	return nil
}
