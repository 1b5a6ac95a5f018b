package metal

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"sync"
	"unsafe"

	"metalcore/backend/dialect"
	"metalcore/internal/core"
)

// Metal's limits that a plan keeps to on every device: bytes set inline
// (setBytes), threadgroup memory, threads of a threadgroup, the SIMD group.
const (
	MaxInlineBytes  = 4096
	MaxGroupMemory  = 32 << 10
	MaxGroupThreads = 1024
	SIMDWidth       = 32
)

// A Plan is the exact list of commands one op call encodes: each family's
// metal.go builds it in portable Go (Dispatch per kernel), and the runtime
// only translates it into Objective-C calls (Encode). Nothing is encoded
// until the whole plan is built and checked, so a refused call encodes
// nothing.
type Plan struct {
	Encoder  unsafe.Pointer // the host's id<MTLComputeCommandEncoder>
	Commands []Command
	rt       Runtime
	err      error
	// what the commands since the last barrier wrote and read
	written, read []span
}

// Command is one dispatch: its pipeline (a kernel of the MSL programs), its
// buffers and values by [[buffer(i)]] index, the buffers it reaches through
// addresses held in its values (useResource), its dynamic threadgroup
// memory (at threadgroup index 0), its grid in threadgroups, and whether a
// buffer-scope memory barrier precedes it.
type Command struct {
	Kernel      string
	Buffers     []Binding
	Values      []Value
	Resources   []Resource
	GroupMemory int
	Groups      int
	Threads     int
	Barrier     bool
}

// Binding is a buffer at a kernel parameter: Buffer at Offset, of which
// the kernel may touch bytes [Lo, Hi) (offsets into the buffer) and writes
// them unless the parameter is const. Absent: the parameter is a null
// pointer, and Buffer another of the command's buffers standing in (the
// entry's mc_bound says which are absent).
type Binding struct {
	Index          int
	Buffer         unsafe.Pointer
	Offset, Lo, Hi uint64
	Write          bool
	Absent         bool
}

// Value is a parameter's bytes (a scalar, or a struct of them), set inline.
// Bound marks the Metal entry's own mc_bound mask, which is no parameter
// of the kernel's source.
type Value struct {
	Index int
	Data  []byte
	Bound bool
}

// Resource is a buffer a kernel reaches through an address in its values.
type Resource struct {
	Buffer unsafe.Pointer
	Lo, Hi uint64
	Write  bool
}

type span struct {
	buffer unsafe.Pointer
	lo, hi uint64
}

// Arg is one kernel argument, in the kernel's parameter order.
type Arg struct {
	buffer         unsafe.Pointer
	offset, lo, hi uint64
	isBuffer       bool
	value          []byte
}

// Buf is v's memory as a kernel's buffer argument (nil: a null pointer).
func Buf(v *core.View) Arg {
	if v == nil {
		return Arg{isBuffer: true}
	}
	lo, hi := v.Extent()
	return Arg{buffer: v.Buffer, offset: v.Offset, lo: uint64(lo), hi: uint64(hi), isBuffer: true}
}

// BufAt is bytes [at, at+n) of v's memory (a workspace's part).
func BufAt(v *core.View, at, n int64) Arg {
	off := v.Offset + uint64(at)
	return Arg{buffer: v.Buffer, offset: off, lo: off, hi: off + uint64(n), isBuffer: true}
}

// I32, I64, U32 and F32 are scalar arguments; Bytes a struct's.
func I32(v int) Arg {
	if v != int(int32(v)) {
		panic(fmt.Sprintf("metal.I32: %d does not fit a 32-bit kernel parameter", v))
	}
	return Arg{value: binary.LittleEndian.AppendUint32(nil, uint32(int32(v)))}
}
func I64(v int64) Arg { return Arg{value: binary.LittleEndian.AppendUint64(nil, uint64(v))} }
func F32(v float32) Arg {
	return Arg{value: binary.LittleEndian.AppendUint32(nil, math.Float32bits(v))}
}
func Bytes(b []byte) Arg {
	return Arg{value: b}
}

// NewPlan starts the plan of one call on encoder (core.CheckEncoder has
// required one).
func NewPlan(encoder unsafe.Pointer) (*Plan, error) {
	rt, err := current()
	if err != nil {
		return nil, core.Errorf(core.ErrUnsupportedDevice, "%v", err)
	}
	return &Plan{Encoder: encoder, rt: rt}, nil
}

// Threads is the threadgroup size for kernel given want: want clamped to
// what the kernel declares and its pipeline allows on the encoder's
// device, in whole SIMD groups (as the CUDA backend clamps a launch's block
// to the kernel's registers). The kernels that take it work with any such
// size.
func (p *Plan) Threads(kernel string, want int) int {
	k, err := lookup(kernel)
	if err != nil {
		p.fail(err)
		return want
	}
	limit := MaxGroupThreads
	if k.MaxThreads > 0 {
		limit = k.MaxThreads
	}
	most, err := p.rt.MaxThreads(p.Encoder, kernel)
	if err != nil {
		p.fail(err)
		return want
	}
	limit = min(limit, most)
	if want <= limit {
		return want
	}
	return max(limit/SIMDWidth*SIMDWidth, SIMDWidth)
}

// WarpThreads is Threads for a kernel whose threadgroup works in SIMD groups
// of 32: want, or, for one that loops over its SIMD groups (shrinks), the
// most the device allows; fn's error where that is less than the kernel
// takes.
func (p *Plan) WarpThreads(fn, kernel string, want int, shrinks bool) (int, error) {
	got := p.Threads(kernel, want)
	if got < want && (!shrinks || got < SIMDWidth) {
		return 0, core.Errorf(core.ErrUnsupportedDevice, "%s: the device runs %s on at most %d threads a threadgroup; "+
			"it needs %d", fn, kernel, got, want)
	}
	return got, nil
}

// DispatchBlocks encodes l's kernel for dt with args on the encoder enc
// (threads as WarpThreads gives them, fn naming the library function in
// its error).
func DispatchBlocks(enc unsafe.Pointer, fn string, l dialect.Blocks, dt core.DType, args ...Arg) error {
	p, err := NewPlan(enc)
	if err != nil {
		return err
	}
	kernel := dialect.Kernel(l.Kernel, dt)
	threads, err := p.WarpThreads(fn, kernel, l.Threads, l.Loops)
	if err != nil {
		return err
	}
	p.DispatchWith(kernel, l.Blocks, threads, l.Shared, nil, args...)
	return p.Encode()
}

// Address is the GPU address of byte offset of buffer (AdamW's tensor
// tables hold addresses), which a command using it must list as a
// Resource.
func (p *Plan) Address(buffer unsafe.Pointer, offset uint64) uint64 {
	if buffer == nil {
		return 0
	}
	a, err := p.rt.GPUAddress(buffer)
	if err != nil {
		p.fail(err)
	}
	return a + offset
}

// Dispatch adds kernel over groups threadgroups of threads with args in
// its parameter order; DispatchWith adds threadgroup memory and resources.
func (p *Plan) Dispatch(kernel string, groups, threads int, args ...Arg) {
	p.DispatchWith(kernel, groups, threads, 0, nil, args...)
}

// DispatchWith is Dispatch with groupMemory bytes of dynamic threadgroup
// memory and the resources reached through addresses in args.
func (p *Plan) DispatchWith(kernel string, groups, threads, groupMemory int, resources []Resource, args ...Arg) {
	if p.err != nil || groups == 0 {
		return
	}
	k, err := lookup(kernel)
	if err != nil {
		p.fail(err)
		return
	}
	c := Command{Kernel: kernel, Groups: groups, Threads: threads, GroupMemory: groupMemory, Resources: resources}
	if len(args) != len(k.Params) {
		p.fail(fmt.Errorf("kernel %s takes %d arguments, the plan gives %d", kernel, len(k.Params), len(args)))
		return
	}
	if len(k.Params) > 32 {
		p.fail(fmt.Errorf("kernel %s: %d parameters, more than its mc_bound mask has bits", kernel, len(k.Params)))
		return
	}
	var standIn unsafe.Pointer // the buffer bound where a pointer is null
	for _, a := range args {
		if a.isBuffer && a.buffer != nil {
			standIn = a.buffer
			break
		}
	}
	var bound uint32
	for i, a := range args {
		prm := k.Params[i]
		if a.isBuffer != prm.Pointer {
			p.fail(fmt.Errorf("kernel %s: argument %d (%s %s) given as the wrong kind", kernel, i, prm.Type, prm.Name))
			return
		}
		if a.isBuffer {
			if a.buffer == nil {
				if standIn == nil {
					p.fail(fmt.Errorf("kernel %s: every buffer argument is null", kernel))
					return
				}
				c.Buffers = append(c.Buffers, Binding{Index: prm.Index, Buffer: standIn, Absent: true})
				continue
			}
			bound |= 1 << prm.Index
			c.Buffers = append(c.Buffers, Binding{Index: prm.Index, Buffer: a.buffer, Offset: a.offset, Lo: a.lo, Hi: a.hi,
				Write: !strings.Contains(prm.Type, "const")})
			continue
		}
		if size := ValueSize(prm.Type); size != 0 && size != len(a.value) || len(a.value) > MaxInlineBytes {
			p.fail(fmt.Errorf("kernel %s: argument %d (%s %s) given %d bytes", kernel, i, prm.Type, prm.Name, len(a.value)))
			return
		}
		c.Values = append(c.Values, Value{Index: prm.Index, Data: a.value})
	}
	if k.BoundIndex() >= 0 {
		c.Values = append(c.Values, Value{Index: k.BoundIndex(), Data: binary.LittleEndian.AppendUint32(nil, bound), Bound: true})
	}
	if threads < 1 || threads > MaxGroupThreads || (threads > SIMDWidth && threads%SIMDWidth != 0) ||
		k.MaxThreads > 0 && threads > k.MaxThreads {
		p.fail(fmt.Errorf("kernel %s: %d threads a threadgroup", kernel, threads))
		return
	}
	if groupMemory < 0 || groupMemory > MaxGroupMemory || (groupMemory > 0) != (k.Dynamic != "") {
		p.fail(fmt.Errorf("kernel %s: %d bytes of threadgroup memory", kernel, groupMemory))
		return
	}
	c.Barrier = p.conflicts(c)
	p.Commands = append(p.Commands, c)
}

// conflicts reports whether c touches what a command since the last
// barrier wrote, or writes what one read (then the barrier is placed
// before c, and c starts the next span of commands).
func (p *Plan) conflicts(c Command) bool {
	var reads, writes []span
	for _, b := range c.Buffers {
		if b.Absent {
			continue
		}
		s := span{b.Buffer, b.Lo, b.Hi}
		reads = append(reads, s)
		if b.Write {
			writes = append(writes, s)
		}
	}
	for _, r := range c.Resources {
		s := span{r.Buffer, r.Lo, r.Hi}
		reads = append(reads, s)
		if r.Write {
			writes = append(writes, s)
		}
	}
	barrier := overlapAny(reads, p.written) || overlapAny(writes, p.read)
	if barrier {
		p.written, p.read = nil, nil
	}
	p.written = append(p.written, writes...)
	p.read = append(p.read, reads...)
	return barrier
}

func overlapAny(a, b []span) bool {
	for _, x := range a {
		for _, y := range b {
			if x.buffer == y.buffer && x.lo < y.hi && y.lo < x.hi {
				return true
			}
		}
	}
	return false
}

func (p *Plan) fail(err error) {
	if p.err == nil {
		p.err = err
	}
}

// Encode hands the plan to the runtime, which checks it against the
// device (buffer lengths and devices, pipelines) before encoding any of it.
func (p *Plan) Encode() error {
	if p.err != nil {
		if _, ok := p.err.(*core.Error); ok {
			return p.err
		}
		return core.Errorf(core.ErrInternal, "metal plan: %v", p.err)
	}
	if len(p.Commands) == 0 {
		return nil
	}
	if err := p.rt.Encode(p.Encoder, p.Commands); err != nil {
		if _, ok := err.(*core.Error); ok {
			return err
		}
		return core.Errorf(core.ErrBackend, "%v", err)
	}
	return nil
}

// ValueSize is the bytes of a scalar parameter type (0: a struct, sized by
// the source).
func ValueSize(typ string) int {
	switch typ {
	case "int", "unsigned", "float":
		return 4
	case "mc_i64", "mc_u64":
		return 8
	}
	return 0
}

// Family is an op family's kernel source, which the runtime compiles as one
// MSL program (Program).
type Family struct{ Name, Source string }

var (
	registry   sync.Mutex
	families   []Family
	kernelsBy  map[string]Kernel
	registryOK error
)

// Register adds an op family's kernel source (from its metal.go's init).
func Register(name, src string) {
	registry.Lock()
	defer registry.Unlock()
	families = append(families, Family{name, src})
	kernelsBy = nil
}

// Families are the registered op families.
func Families() []Family {
	registry.Lock()
	defer registry.Unlock()
	return append([]Family(nil), families...)
}

// lookup is a registered kernel's declaration.
func lookup(name string) (Kernel, error) {
	registry.Lock()
	defer registry.Unlock()
	if kernelsBy == nil {
		kernelsBy, registryOK = map[string]Kernel{}, nil
		for _, f := range families {
			ks, err := Kernels(f.Source)
			if err != nil {
				registryOK = err
			}
			for _, k := range ks {
				kernelsBy[k.Name] = k
			}
		}
	}
	if registryOK != nil {
		return Kernel{}, registryOK
	}
	k, ok := kernelsBy[name]
	if !ok {
		return Kernel{}, fmt.Errorf("no Metal kernel %s", name)
	}
	return k, nil
}

// CheckBuffers is the runtime's check of a plan against its buffers before
// anything is encoded: each bound or resident buffer is lengthOf bytes long
// (which must cover what the commands touch) and on the encoder's device.
func CheckBuffers(commands []Command, lengthOf func(buffer unsafe.Pointer) uint64, onDevice func(buffer unsafe.Pointer) bool) error {
	check := func(kernel string, buffer unsafe.Pointer, hi uint64) error {
		if buffer == nil {
			return nil
		}
		if !onDevice(buffer) {
			return core.Errorf(core.ErrInvalidArgument, "%s: buffer %p is not memory of the encoder's device", kernel, buffer)
		}
		if n := lengthOf(buffer); hi > n {
			return core.Errorf(core.ErrInvalidArgument, "%s: buffer %p is %d bytes long, the tensor's view reaches byte %d",
				kernel, buffer, n, hi)
		}
		return nil
	}
	for _, c := range commands {
		for _, b := range c.Buffers {
			if b.Buffer == nil { // Metal's validation refuses it for an index the kernel declares
				return core.Errorf(core.ErrInternal, "%s: buffer(%d) bound to nil", c.Kernel, b.Index)
			}
			if err := check(c.Kernel, b.Buffer, b.Hi); err != nil {
				return err
			}
		}
		for _, r := range c.Resources {
			if err := check(c.Kernel, r.Buffer, r.Hi); err != nil {
				return err
			}
		}
	}
	return nil
}
