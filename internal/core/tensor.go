package core

import (
	"math"
	"math/bits"
	"unsafe"
)

// Device types (DLPack codes).
const (
	DeviceCPU   = 1
	DeviceCUDA  = 2
	DeviceMetal = 8
)

// MaxDims bounds ndim so that a garbage descriptor cannot make validation
// walk far into memory.
const MaxDims = 32

// Tensor has exactly the memory layout of mc_tensor / DLTensor, so capi can
// reinterpret the host's pointer without copying.
type Tensor struct {
	Data       unsafe.Pointer
	DeviceType int32
	DeviceID   int32
	NDim       int32
	Code       uint8
	Bits       uint8
	Lanes      uint16
	Shape      *int64
	Strides    *int64
	ByteOffset uint64
}

// DType is an element type metalcore computes on.
type DType uint8

const (
	F32 DType = iota + 1
	F16
	BF16
	// I64 is an index (a class target): only CheckIndex makes views of it,
	// so no float kernel sees one.
	I64
	// I32 is a per-matrix status (a factorization's info): only CheckInfo
	// makes views of it.
	I32
)

func (d DType) Size() int {
	switch d {
	case F32, I32:
		return 4
	case I64:
		return 8
	}
	return 2
}

func (d DType) String() string {
	switch d {
	case F32:
		return "float32"
	case F16:
		return "float16"
	case BF16:
		return "bfloat16"
	case I64:
		return "int64"
	case I32:
		return "int32"
	}
	return "invalid"
}

// DLPack type codes.
const (
	codeInt    = 0
	codeFloat  = 2
	codeBFloat = 4
	codeUInt   = 1
)

// View is a validated tensor: element type, shape, and the layout facts the
// kernels and the overlap checks need. Shape and Strides point at the
// caller's memory; a View is only used during the call that made it.
type View struct {
	Name string
	Base unsafe.Pointer // data + byte_offset; Metal: the buffer
	// Buffer is a Metal tensor's id<MTLBuffer> (its data) and Offset its
	// byte_offset into that buffer; nil on other devices. Two Metal views
	// can overlap only within one buffer: their extents are offsets into it.
	// (A handle plus an offset is no address, and is never formed.)
	Buffer     unsafe.Pointer
	Offset     uint64
	DType      DType
	DeviceType int32
	DeviceID   int32
	Shape      []int64
	Strides    []int64 // nil when row-major contiguous
	N          int     // number of elements
	Cols       int     // size of the last dimension (1 for 0-d)
	Rows       int     // N / Cols (0 when empty)
	Contiguous bool
	lo, hi     uintptr // byte extent [lo, hi), empty when N == 0
}

// Check validates a tensor argument: not NULL, a sane descriptor, a supported
// device and dtype, sizes without overflow, and a contiguous last dimension,
// into v (filled in place: list ops check thousands of tensors a call).
func Check(v *View, name string, t *Tensor) error { return check(v, name, t, dtypeOf) }

// CheckIndex is Check for a tensor of int64 indices (class targets).
func CheckIndex(v *View, name string, t *Tensor) error { return check(v, name, t, indexDType) }

// CheckInfo is Check for a tensor of int32 statuses (a factorization's
// info, one per matrix).
func CheckInfo(v *View, name string, t *Tensor) error { return check(v, name, t, infoDType) }

func infoDType(name string, t *Tensor) (DType, error) {
	if t.Lanes == 1 && t.Code == codeInt && t.Bits == 32 {
		return I32, nil
	}
	return 0, Errorf(ErrUnsupportedDType, "%s has dtype (code %d, bits %d, lanes %d); it must be int32",
		name, t.Code, t.Bits, t.Lanes)
}

func indexDType(name string, t *Tensor) (DType, error) {
	if t.Lanes == 1 && t.Code == codeInt && t.Bits == 64 {
		return I64, nil
	}
	return 0, Errorf(ErrUnsupportedDType, "%s has dtype (code %d, bits %d, lanes %d); indices must be int64",
		name, t.Code, t.Bits, t.Lanes)
}

func check(v *View, name string, t *Tensor, dtypeOf func(string, *Tensor) (DType, error)) error {
	*v = View{Name: name}
	if t == nil {
		return Errorf(ErrInvalidArgument, "%s is NULL", name)
	}
	if err := checkDevice(name, t.DeviceType); err != nil {
		return err
	}
	dt, err := dtypeOf(name, t)
	if err != nil {
		return err
	}
	if t.NDim < 0 || t.NDim > MaxDims {
		return Errorf(ErrInvalidArgument, "%s has ndim %d (must be 0..%d)", name, t.NDim, MaxDims)
	}
	if t.NDim > 0 && t.Shape == nil {
		return Errorf(ErrInvalidArgument, "%s has a NULL shape with ndim %d", name, t.NDim)
	}
	v.DType, v.DeviceType, v.DeviceID = dt, t.DeviceType, t.DeviceID
	if t.NDim > 0 {
		v.Shape = unsafe.Slice(t.Shape, t.NDim)
		if t.Strides != nil {
			v.Strides = unsafe.Slice(t.Strides, t.NDim)
		}
	}
	n := uint64(1)
	for i, s := range v.Shape {
		if s < 0 {
			return Errorf(ErrInvalidArgument, "%s has negative size %d in dimension %d", name, s, i)
		}
		hi, lo := bits.Mul64(n, uint64(s))
		if hi != 0 || lo > math.MaxInt64/8 {
			return Errorf(ErrInvalidArgument, "%s has too many elements (size overflow)", name)
		}
		n = lo
	}
	v.N = int(n)
	v.Cols = 1
	if len(v.Shape) > 0 {
		v.Cols = int(v.Shape[len(v.Shape)-1])
	}
	if v.N > 0 {
		v.Rows = v.N / v.Cols
		if t.Data == nil {
			return Errorf(ErrInvalidArgument, "%s has NULL data", name)
		}
	}
	if uint64(uintptr(t.Data))+t.ByteOffset < t.ByteOffset {
		return Errorf(ErrInvalidArgument, "%s has data + byte_offset past the end of the address space (byte_offset %d)", name, t.ByteOffset)
	}
	if t.DeviceType == DeviceMetal {
		v.Base, v.Buffer, v.Offset = t.Data, t.Data, t.ByteOffset
	} else {
		v.Base = unsafe.Add(t.Data, t.ByteOffset)
	}
	if v.origin()%uint64(dt.Size()) != 0 {
		return Errorf(ErrInvalidArgument, "%s data (data + byte_offset) is not aligned to its %d-byte elements", name, dt.Size())
	}
	if err := v.layout(); err != nil {
		return err
	}
	return nil
}

// backend is a device backend other than the CPU, registered by its encoder.
type backend struct {
	name      string
	available func() error
	owns      func(p unsafe.Pointer, deviceID int) error
}

var backends = map[int32]backend{}

// RegisterBackend makes tensors of deviceType valid when available()
// returns nil; owns checks that a data pointer is memory of a device.
func RegisterBackend(deviceType int32, available func() error, owns func(p unsafe.Pointer, deviceID int) error) {
	backends[deviceType] = backend{deviceNames[deviceType], available, owns}
}

var deviceNames = map[int32]string{DeviceCPU: "CPU", DeviceCUDA: "CUDA", DeviceMetal: "Metal"}

// CheckOwned fails unless v's data is memory of its device, as the device's
// backend tells (CPU memory and empty views pass).
func CheckOwned(v *View) error {
	if v.DeviceType == DeviceCPU {
		return nil
	}
	b, ok := backends[v.DeviceType]
	if !ok || v.N == 0 {
		return nil
	}
	if err := b.owns(v.Base, int(v.DeviceID)); err != nil { // Metal: the buffer
		return Errorf(ErrInvalidArgument, "%s data %v", v.Name, err)
	}
	return nil
}

// ChecksOwnership reports whether deviceType's backend checks that data
// pointers are its memory (CheckOwned does nothing otherwise).
func ChecksOwnership(deviceType int32) bool {
	_, ok := backends[deviceType]
	return ok
}

// BackendAvailable reports whether tensors of deviceType can be used.
func BackendAvailable(deviceType int32) bool {
	if deviceType == DeviceCPU {
		return true
	}
	b, ok := backends[deviceType]
	return ok && b.available() == nil
}

func checkDevice(name string, dev int32) error {
	if dev == DeviceCPU { // no backend registers the CPU: spare the lookup
		return nil
	}
	if b, ok := backends[dev]; ok {
		if err := b.available(); err != nil {
			return Errorf(ErrUnsupportedDevice, "%s is a %s tensor but the %s backend is unavailable: %v", name, b.name, b.name, err)
		}
		return nil
	}
	switch dev {
	case DeviceCUDA:
		return Errorf(ErrUnsupportedDevice, "%s is a CUDA tensor: the CUDA backend is not available in this build", name)
	case DeviceMetal:
		return Errorf(ErrUnsupportedDevice, "%s is a Metal tensor: the Metal backend is not available on this platform", name)
	}
	return Errorf(ErrUnsupportedDevice, "%s has unsupported device type %d", name, dev)
}

func dtypeOf(name string, t *Tensor) (DType, error) {
	if t.Lanes == 1 {
		switch {
		case t.Code == codeFloat && t.Bits == 32:
			return F32, nil
		case t.Code == codeFloat && t.Bits == 16:
			return F16, nil
		case t.Code == codeBFloat && t.Bits == 16:
			return BF16, nil
		}
	}
	return 0, Errorf(ErrUnsupportedDType, "%s has dtype (code %d, bits %d, lanes %d); supported: float32, float16, bfloat16",
		name, t.Code, t.Bits, t.Lanes)
}

// userSpaceEnd bounds the addresses a CPU tensor may cover: user space ends
// below 2^47 (x86-64, 4-level paging), 2^52 (arm64) or 2^56 (x86-64, 5-level
// paging); an address above that is a corrupt descriptor, not memory.
const userSpaceEnd = 1 << 56

// layout fills Contiguous and the byte extent, and rejects a last dimension
// that is not unit-stride, strides whose offsets overflow, and an extent that
// wraps around the address space (or, on the CPU, leaves user space).
func (v *View) layout() error {
	v.Contiguous = true
	var lo, hi int64 // element offsets of the first and last element
	if v.Strides == nil || v.N == 0 {
		v.Strides = nil
		hi = int64(v.N) - 1
	} else {
		nd := len(v.Shape)
		if v.Shape[nd-1] > 1 && v.Strides[nd-1] != 1 {
			return Errorf(ErrUnsupportedLayout, "%s has stride %d in its last dimension (must be 1)", v.Name, v.Strides[nd-1])
		}
		expect := int64(1)
		overflow := false
		for i := nd - 1; i >= 0; i-- {
			s, st := v.Shape[i], v.Strides[i]
			if s > 1 && st != expect {
				v.Contiguous = false
			}
			expect *= s // at most N: no overflow
			if s > 1 {
				span, ok := mulNoOverflow(s-1, st)
				overflow = overflow || !ok
				if span > 0 {
					hi, ok = addNoOverflow(hi, span)
				} else {
					lo, ok = addNoOverflow(lo, span)
				}
				overflow = overflow || !ok
			}
		}
		if overflow || hi > math.MaxInt64/16 || lo < math.MinInt64/16 {
			return Errorf(ErrInvalidArgument, "%s has strides whose offsets overflow", v.Name)
		}
		if v.Contiguous {
			v.Strides = nil
		}
	}
	es := int64(v.DType.Size())
	base := v.origin()
	// [base + lo*es, base + (hi+1)*es) must not wrap (lo <= 0 <= hi)
	start, end := base-uint64(-lo*es), base+uint64((hi+1)*es)
	if start > base || end < base || (v.DeviceType == DeviceCPU && v.N > 0 && end > userSpaceEnd) {
		return Errorf(ErrInvalidArgument, "%s covers addresses [%#x, %#x) outside the address space", v.Name, start, end)
	}
	if v.N == 0 {
		start, end = base, base
	}
	v.lo, v.hi = uintptr(start), uintptr(end)
	return nil
}

// origin is where v's extent is measured from: its address, or for Metal
// its byte offset into its buffer (a Metal handle is an object, not the
// buffer's memory).
func (v *View) origin() uint64 {
	if v.Buffer != nil {
		return v.Offset
	}
	return uint64(uintptr(v.Base))
}

func addNoOverflow(a, b int64) (int64, bool) {
	c := a + b
	return c, (c > a) == (b > 0)
}

func mulNoOverflow(a, b int64) (int64, bool) {
	if a == 0 || b == 0 {
		return 0, true
	}
	c := a * b
	return c, c/b == a
}

// RowPtr is the address of the first element of row r (the row-major index
// over all dimensions but the last).
func (v *View) RowPtr(r int) unsafe.Pointer {
	es := v.DType.Size()
	if v.Strides == nil {
		return unsafe.Add(v.Base, r*v.Cols*es)
	}
	off := 0
	for i := len(v.Shape) - 2; i >= 0; i-- {
		s := int(v.Shape[i])
		off += (r % s) * int(v.Strides[i])
		r /= s
	}
	return unsafe.Add(v.Base, off*es)
}

// RowStride is the distance in elements between consecutive rows when the
// outer dimensions collapse into one strided row index (ok false otherwise):
// what the GPU row kernels take.
func (v *View) RowStride() (int64, bool) {
	if v.Strides == nil {
		return int64(v.Cols), true
	}
	var stride, expect int64
	found := false
	for i := len(v.Shape) - 2; i >= 0; i-- {
		if v.Shape[i] == 1 {
			continue
		}
		if !found {
			stride, expect, found = v.Strides[i], v.Strides[i]*v.Shape[i], true
			continue
		}
		if v.Strides[i] != expect {
			return 0, false
		}
		expect *= v.Shape[i]
	}
	if !found {
		return int64(v.Cols), true
	}
	return stride, true
}

// Extent is the byte range [lo, hi) the view's elements occupy: addresses,
// or for Metal offsets into v.Buffer.
func (v *View) Extent() (uintptr, uintptr) { return v.lo, v.hi }
