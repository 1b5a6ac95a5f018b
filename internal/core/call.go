package core

import (
	"math"
	"sync"
	"unsafe"
)

// Call validates one op call. Arguments are registered in order; the first
// failure is kept and later checks are skipped, so an op reads as a flat
// list of requirements ending in Done. Ops take one from NewCall and give
// it back with Free: its views are handed to the device's implementation
// through a function value, which escape analysis cannot see through, so a
// Call on the op's stack would be moved to the heap on every call.
type Call struct {
	err      error
	views    [maxArgs]View
	n        int
	isOut    [maxArgs]bool
	inPlace  [maxArgs][2]int8 // (output, input) index pairs allowed to alias
	nInPlace int
}

const maxArgs = 10

var calls = sync.Pool{New: func() any { return new(Call) }}

// NewCall is an empty Call from a pool.
func NewCall() *Call { return calls.Get().(*Call) }

// Free empties c and returns it to the pool; nothing may use c or its views
// afterwards.
func (c *Call) Free() {
	clear(c.views[:min(c.n+1, maxArgs)]) // and the one a failed check wrote; the rest are zero already
	c.err, c.n, c.nInPlace = nil, 0, 0
	calls.Put(c)
}

func (c *Call) add(name string, t *Tensor, optional, output bool) *View {
	return c.addAs(name, t, optional, output, Check)
}

func (c *Call) addAs(name string, t *Tensor, optional, output bool, check func(*View, string, *Tensor) error) *View {
	if c.err != nil || (optional && t == nil) {
		return nil
	}
	if err := check(&c.views[c.n], name, t); err != nil {
		c.err = err
		return nil
	}
	c.isOut[c.n] = output
	c.n++
	return &c.views[c.n-1]
}

// index is the position of registered view v.
func (c *Call) index(v *View) int8 {
	for i := range c.n {
		if &c.views[i] == v {
			return int8(i)
		}
	}
	panic("core: view not registered with this call")
}

// In registers a required input tensor.
func (c *Call) In(name string, t *Tensor) *View { return c.add(name, t, false, false) }

// Index registers a required input of int64 indices.
func (c *Call) Index(name string, t *Tensor) *View { return c.addAs(name, t, false, false, CheckIndex) }

// Info registers a required output of int32 statuses.
func (c *Call) Info(name string, t *Tensor) *View { return c.addAs(name, t, false, true, CheckInfo) }

// OptIn registers an optional input: nil when t is NULL.
func (c *Call) OptIn(name string, t *Tensor) *View { return c.add(name, t, true, false) }

// Out registers a required output tensor.
func (c *Call) Out(name string, t *Tensor) *View { return c.add(name, t, false, true) }

// OptOut registers an optional output: nil when t is NULL.
func (c *Call) OptOut(name string, t *Tensor) *View { return c.add(name, t, true, true) }

// Check runs f unless an earlier check failed; f may assume every required
// view registered so far is non-nil.
func (c *Call) Check(f func() error) {
	if c.err == nil {
		c.err = f()
	}
}

// Fail records err unless an earlier check failed.
func (c *Call) Fail(err error) {
	if c.err == nil {
		c.err = err
	}
}

// AllowInPlace lets out alias in exactly.
func (c *Call) AllowInPlace(out, in *View) {
	if out != nil && in != nil {
		c.inPlace[c.nInPlace] = [2]int8{c.index(out), c.index(in)}
		c.nInPlace++
	}
}

// Done finishes validation: every tensor on one device, an encoder that
// fits it, no forbidden overlap. It returns the first failure.
func (c *Call) Done(encoder unsafe.Pointer) error { return c.done(encoder, true) }

// DoneQuery is Done for a size query, which takes no encoder.
func (c *Call) DoneQuery() error { return c.done(nil, false) }

func (c *Call) done(encoder unsafe.Pointer, encodes bool) error {
	if c.err != nil {
		return c.err
	}
	// inputs then outputs, each in registration order
	var buf [maxArgs]*View
	k, nIn := 0, 0
	for _, out := range []bool{false, true} {
		for i := range c.n {
			if c.isOut[i] == out {
				buf[k] = &c.views[i] // assigned, not appended: c stays on the stack
				k++
			}
		}
		if !out {
			nIn = k
		}
	}
	all := buf[:k]
	var allowed [maxArgs]Alias
	for i, p := range c.inPlace[:c.nInPlace] {
		allowed[i] = Alias{&c.views[p[0]], &c.views[p[1]]}
	}
	if len(all) > 0 {
		if err := SameDevice(all...); err != nil {
			return err
		}
		if err := CheckEncoder(all[0].DeviceType, encoder); encodes && err != nil {
			return err
		}
		for _, v := range all {
			if err := CheckOwned(v); err != nil {
				return err
			}
		}
	}
	if err := CheckOverlap(all[:nIn], all[nIn:], allowed[:c.nInPlace]...); err != nil {
		return err
	}
	if encodes && len(all) > nIn && all[0].DeviceType == DeviceCPU && cpuOutputReady != nil {
		for _, v := range all[nIn:] {
			cpuOutputReady(v)
		}
	}
	return nil
}

// cpuOutputReady readies a validated CPU call's outputs for its kernel's
// writes (RegisterCPUOutputReady).
var cpuOutputReady func(*View)

// RegisterCPUOutputReady makes ready run on every output of each validated
// CPU call, just before its kernel runs (the CPU backend advises the
// kernel's memory for large outputs there).
func RegisterCPUOutputReady(ready func(*View)) { cpuOutputReady = ready }

// RowStats checks a per-row float32 output or input (rstd, mean): one
// contiguous value per row of x, shaped [rows] or like x without its last
// dimension.
func RowStats(v, x *View) error {
	if v == nil {
		return nil
	}
	if err := WantDType(v, F32); err != nil {
		return err
	}
	if err := WantVector(v, x.Rows, Outer(x)); err != nil {
		return err
	}
	return WantContiguous(v)
}

// WantRows requires x to have at least one dimension (the reduced one).
func WantRows(x *View) error {
	if len(x.Shape) == 0 {
		return Errorf(ErrInvalidArgument, "%s is 0-d; it needs a last dimension to reduce over", x.Name)
	}
	return nil
}

// LikeX requires each view to have x's shape and dtype.
func LikeX(x *View, vs ...*View) error {
	for _, v := range vs {
		if v == nil {
			continue
		}
		if err := SameShape(x, v); err != nil {
			return err
		}
		if err := SameDType(x, v); err != nil {
			return err
		}
	}
	return nil
}

// PerColumn requires each (optional) view to be [cols] of x's dtype and
// contiguous: weight, bias and their gradients.
func PerColumn(x *View, vs ...*View) error {
	for _, v := range vs {
		if v == nil {
			continue
		}
		if err := SameDType(x, v); err != nil {
			return err
		}
		if err := WantVector(v, x.Cols, nil); err != nil {
			return err
		}
		if err := WantContiguous(v); err != nil {
			return err
		}
	}
	return nil
}

// Workspace registers a caller-owned scratch tensor: 1-D uint8 or float32,
// contiguous, 4-byte aligned, at least need bytes. It is viewed as float32
// and must not overlap any other tensor of the call. NULL is accepted (and
// nil returned) only when need is 0.
func (c *Call) Workspace(name string, t *Tensor, need int64) *View {
	if c.err != nil {
		return nil
	}
	if t == nil {
		if need > 0 {
			c.err = Errorf(ErrInvalidArgument, "%s is NULL but %d bytes are needed", name, need)
		}
		return nil
	}
	f := *t
	switch {
	case t.Lanes == 1 && t.Code == codeUInt && t.Bits == 8:
		f.Code, f.Bits = codeFloat, 32
	case t.Lanes == 1 && t.Code == codeFloat && t.Bits == 32:
	default:
		c.err = Errorf(ErrUnsupportedDType, "%s has dtype (code %d, bits %d, lanes %d); a workspace is uint8 or float32",
			name, t.Code, t.Bits, t.Lanes)
		return nil
	}
	bytesPerElem := int64(t.Bits / 8)
	if t.NDim != 1 || t.Shape == nil {
		c.err = Errorf(ErrInvalidArgument, "%s must be 1-D", name)
		return nil
	}
	if *t.Shape > math.MaxInt64/bytesPerElem {
		c.err = Errorf(ErrInvalidArgument, "%s has %d elements: its size in bytes overflows", name, *t.Shape)
		return nil
	}
	size := *t.Shape * bytesPerElem
	if *t.Shape < 0 || size < need {
		c.err = Errorf(ErrInvalidArgument, "%s has %d bytes, %d are needed", name, max(size, 0), need)
		return nil
	}
	floats := size / 4
	f.Shape = &floats
	v := c.Out(name, &f)
	if v == nil {
		return nil
	}
	switch {
	case !v.Contiguous:
		c.err = Errorf(ErrUnsupportedLayout, "%s must be contiguous", name)
	case v.origin()%4 != 0:
		c.err = Errorf(ErrInvalidArgument, "%s data must be 4-byte aligned", name)
	}
	return v
}

// CheckEncoder fails for an encoder given with CPU tensors (they have no
// queue) and for none with Metal tensors (metalcore encodes on the host's
// open compute encoder and has no queue of its own).
func CheckEncoder(deviceType int32, encoder unsafe.Pointer) error {
	switch {
	case deviceType == DeviceCPU && encoder != nil:
		return Errorf(ErrInvalidArgument, "encoder must be NULL for CPU tensors")
	case deviceType == DeviceMetal && encoder == nil:
		return Errorf(ErrInvalidArgument, "encoder is NULL: Metal tensors need the host's open id<MTLComputeCommandEncoder>")
	}
	return nil
}
