// Package testutil builds tensors in Go memory for the op tests: filled
// from float64 values rounded to the dtype, read back, poisoned, with
// optional padded rows and byte offsets, and compared against float64
// references with per-dtype tolerances.
package testutil

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"metalcore/backend/cpu"
	"metalcore/backend/cpu/simd"
	"metalcore/backend/cuda"
	"metalcore/internal/core"
)

// DTypes is every dtype the ops support.
var DTypes = []core.DType{core.F32, core.F16, core.BF16}

// Tensor is a test tensor and the memory behind it: host memory, mirrored
// on the GPU when the tensor lives there (see OnCUDA).
type Tensor struct {
	T       core.Tensor
	DT      core.DType
	Shape   []int64
	Strides []int64 // nil: contiguous
	mem     []uint64
	base    unsafe.Pointer
	bytes   int
	dev     Memory
}

// Memory is a tensor's allocation on a GPU, mirrored from and to the
// tensor's host memory.
type Memory interface {
	Handle() unsafe.Pointer // what a tensor's data holds
	CopyIn(src unsafe.Pointer) error
	CopyOut(dst unsafe.Pointer) error // after the work queued before it
	Free() error
}

// gpuAlloc makes each GPU backend's memory: CUDA's here, the Metal
// simulator's in a metalsim build (metalsim.go).
var gpuAlloc = map[int32]func(bytes int) (Memory, error){
	core.DeviceCUDA: func(bytes int) (Memory, error) {
		d, err := cuda.Alloc(0, bytes)
		return cudaMemory{d}, err
	},
}

type cudaMemory struct{ *cuda.Buffer }

func (m cudaMemory) Handle() unsafe.Pointer { return m.Ptr }
func (m cudaMemory) CopyOut(dst unsafe.Pointer) error {
	if err := cuda.Sync(); err != nil {
		return err
	}
	return m.Buffer.CopyOut(dst)
}

// Backend is one implementation the conformance suite runs against, passed
// to every case as a value (gonum's testlapack pattern): the CPU with one
// instruction set, or a GPU. Its New makes the case's tensors on its device.
type Backend struct {
	Name       string
	DeviceType int32  // core.DeviceCPU or a GPU's device type
	ISA        string // the CPU implementation it runs (for the CPU)
}

// CPU is the CPU with whatever implementation is active; CUDA is CUDA
// device 0 (benchmarks name it directly).
var (
	CPU   = Backend{Name: "cpu", DeviceType: core.DeviceCPU}
	CUDA  = Backend{Name: "cuda", DeviceType: core.DeviceCUDA}
	Metal = Backend{Name: "metal", DeviceType: core.DeviceMetal}
)

// GPU reports whether the backend's tensors live in device memory (its
// kernels run asynchronously and its pointers are not host pointers).
func (b Backend) GPU() bool { return b.DeviceType > core.DeviceCPU }

// New is New on b's device: allocated and poisoned on the host, mirrored
// to the device, read back by Values and Bytes.
func (b Backend) New(dt core.DType, shape []int64, opts ...Option) *Tensor {
	t := New(dt, shape, opts...)
	if alloc := gpuAlloc[b.DeviceType]; alloc != nil {
		d, err := alloc(len(t.mem) * 8)
		if err != nil {
			panic(err)
		}
		t.dev = d
		t.T.Data, t.T.DeviceType = d.Handle(), b.DeviceType
		runtime.SetFinalizer(t, func(t *Tensor) { t.dev.Free() })
		t.push()
	}
	return t
}

// Option changes how New lays a tensor out.
type Option func(*layout)

type layout struct {
	rowPad int // extra elements after each row
	offset int // byte_offset in elements
}

// RowPad leaves pad unused elements after every row (a non-contiguous,
// row-strided layout).
func RowPad(pad int) Option { return func(l *layout) { l.rowPad = pad } }

// Offset places the data offset elements past the allocation, through
// byte_offset.
func Offset(elems int) Option { return func(l *layout) { l.offset = elems } }

// New allocates a CPU tensor of dtype dt and shape, poisoned with NaN.
func New(dt core.DType, shape []int64, opts ...Option) *Tensor {
	var l layout
	for _, o := range opts {
		o(&l)
	}
	t := &Tensor{DT: dt, Shape: append([]int64(nil), shape...)}
	n, cols := 1, 1
	for _, s := range shape {
		n *= int(s)
	}
	if len(shape) > 0 {
		cols = int(shape[len(shape)-1])
	}
	elems := n
	if l.rowPad > 0 && len(shape) > 0 {
		t.Strides = make([]int64, len(shape))
		st := int64(1)
		for i := len(shape) - 1; i >= 0; i-- {
			t.Strides[i] = st
			if i == len(shape)-1 {
				st = int64(cols + l.rowPad)
			} else {
				st *= shape[i]
			}
		}
		rows := 1
		if cols > 0 {
			rows = n / cols
		}
		elems = rows * (cols + l.rowPad)
	}
	t.bytes = (elems + l.offset) * dt.Size()
	t.mem = make([]uint64, t.bytes/8+2)
	t.base = unsafe.Pointer(&t.mem[0])
	t.T = core.Tensor{Data: t.base, DeviceType: core.DeviceCPU, NDim: int32(len(shape)), Lanes: 1,
		ByteOffset: uint64(l.offset * dt.Size())}
	t.T.Code, t.T.Bits = DLPack(dt)
	if len(t.Shape) > 0 {
		t.T.Shape = &t.Shape[0]
	}
	if t.Strides != nil {
		t.T.Strides = &t.Strides[0]
	}
	t.Poison()
	return t
}

// DLPack is dt's (code, bits).
func DLPack(dt core.DType) (uint8, uint8) {
	switch dt {
	case core.BF16:
		return 4, 16
	case core.F16:
		return 2, 16
	case core.I64:
		return 0, 64
	case core.I32:
		return 0, 32
	}
	return 2, 32
}

// On is the backend whose device holds t (for the tensors a helper makes
// to go with it).
func (t *Tensor) On() Backend {
	switch t.T.DeviceType {
	case core.DeviceCUDA:
		return CUDA
	case core.DeviceMetal:
		return Metal
	}
	return CPU
}

// Ptr is the descriptor to pass to an op.
func (t *Tensor) Ptr() *core.Tensor { return &t.T }

// Poison fills the whole allocation, padding included, with NaN.
func (t *Tensor) Poison() {
	b := unsafe.Slice((*byte)(t.base), len(t.mem)*8)
	pat := []byte{0xc0, 0x7f} // bf16 NaN; f16 0x7fc0 is NaN too; f32 0x7fc07fc0 is NaN
	for i := range b {
		b[i] = pat[i%2]
	}
	t.push()
}

// push copies the host memory to the GPU mirror.
func (t *Tensor) push() {
	if t.dev != nil {
		must(t.dev.CopyIn(t.base))
	}
}

// pull waits for the GPU and copies its memory back to the host.
func (t *Tensor) pull() {
	if t.dev != nil {
		must(t.dev.CopyOut(t.base))
	}
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}

// Bytes is a copy of the whole allocation, to prove a failed call wrote
// nothing.
func (t *Tensor) Bytes() []byte {
	t.pull()
	return append([]byte(nil), unsafe.Slice((*byte)(t.base), len(t.mem)*8)...)
}

func (t *Tensor) offsets() []int {
	n := 1
	for _, s := range t.Shape {
		n *= int(s)
	}
	offs := make([]int, n)
	for i := range offs {
		off, r := 0, i
		for d := len(t.Shape) - 1; d >= 0; d-- {
			s := int(t.Shape[d])
			st := 1
			if t.Strides != nil {
				st = int(t.Strides[d])
			} else {
				for _, q := range t.Shape[d+1:] {
					st *= int(q)
				}
			}
			off += (r % s) * st
			r /= s
		}
		offs[i] = off
	}
	return offs
}

func (t *Tensor) data() unsafe.Pointer { return unsafe.Add(t.base, t.T.ByteOffset) }

// Set stores vals (row-major logical order), rounded to the dtype.
func (t *Tensor) Set(vals []float64) *Tensor {
	defer t.push()
	t.pull()
	p := t.data()
	for i, off := range t.offsets() {
		switch t.DT {
		case core.F32:
			*(*float32)(unsafe.Add(p, off*4)) = float32(vals[i])
		case core.I64:
			*(*int64)(unsafe.Add(p, off*8)) = int64(vals[i])
		case core.I32:
			*(*int32)(unsafe.Add(p, off*4)) = int32(vals[i])
		case core.BF16:
			*(*uint16)(unsafe.Add(p, off*2)) = simd.F32ToBF16(float32(vals[i]))
		default:
			*(*uint16)(unsafe.Add(p, off*2)) = simd.F32ToF16(float32(vals[i]))
		}
	}
	return t
}

// Values reads the elements back in row-major logical order.
func (t *Tensor) Values() []float64 {
	t.pull()
	p := t.data()
	offs := t.offsets()
	out := make([]float64, len(offs))
	for i, off := range offs {
		switch t.DT {
		case core.F32:
			out[i] = float64(*(*float32)(unsafe.Add(p, off*4)))
		case core.I64:
			out[i] = float64(*(*int64)(unsafe.Add(p, off*8)))
		case core.I32:
			out[i] = float64(*(*int32)(unsafe.Add(p, off*4)))
		case core.BF16:
			out[i] = float64(simd.BF16ToF32(*(*uint16)(unsafe.Add(p, off*2))))
		default:
			out[i] = float64(simd.F16ToF32(*(*uint16)(unsafe.Add(p, off*2))))
		}
	}
	return out
}

// Round is v rounded to dt and back.
func Round(dt core.DType, v float64) float64 {
	switch dt {
	case core.BF16:
		return float64(simd.BF16ToF32(simd.F32ToBF16(float32(v))))
	case core.F16:
		return float64(simd.F16ToF32(simd.F32ToF16(float32(v))))
	}
	return float64(float32(v))
}

// Rand fills t with normal values of the given scale and returns them as
// stored (already rounded).
func (t *Tensor) Rand(rng *rand.Rand, scale float64) []float64 {
	v := make([]float64, len(t.offsets()))
	for i := range v {
		v[i] = rng.NormFloat64() * scale
	}
	return t.Set(v).Values()
}

// Tol is the relative tolerance of results stored in dt.
func Tol(dt core.DType) float64 {
	switch dt {
	case core.BF16:
		return 1.0 / 64
	case core.F16:
		return 1.0 / 512
	}
	return 2e-5
}

// Close fails t unless every got[i] is within tol*(|want[i]| + rms(want))
// of want[i]: relative to each value, with a floor relative to the whole
// tensor's magnitude, since values near zero carry the rounding of their
// neighbours.
func Close(t testing.TB, what string, got, want []float64, tol float64) {
	t.Helper()
	CloseScaled(t, what, got, want, tol, RMS(want))
}

// RMS is the root mean square of v.
func RMS(v []float64) float64 {
	var ss float64
	for _, w := range v {
		ss += w * w
	}
	return math.Sqrt(ss / float64(max(len(v), 1)))
}

// CloseScaled is Close with the floor given: for results that come from
// cancellation, the scale of the terms rather than of the result.
func CloseScaled(t testing.TB, what string, got, want []float64, tol, floor float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	if floor == 0 {
		floor = 1
	}
	bad := 0
	for i := range got {
		if !(math.Abs(got[i]-want[i]) <= tol*(math.Abs(want[i])+floor)) {
			if bad < 5 {
				t.Errorf("%s[%d] = %g, want %g (tol %g, scale %g)", what, i, got[i], want[i], tol, floor)
			}
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d of %d values out of tolerance", what, bad, len(got))
	}
}

// ForEachISA runs f once per CPU implementation this machine has, with
// that implementation active.
func ForEachISA(t *testing.T, f func(t *testing.T)) {
	defer cpu.Use(cpu.ISAs()[0])
	for _, name := range cpu.ISAs() {
		if err := cpu.Use(name); err != nil {
			t.Fatal(err)
		}
		t.Run(name, f)
	}
}

// Backends are the implementations this machine has: the CPU once per
// instruction set, and CUDA where a GPU is present. Without a GPU the CUDA
// run is left out with a log line, unless MC_REQUIRE_BACKENDS (a
// comma-separated list: cpu, cuda) names it: then a missing backend, or
// one whose kernels do not compile and load, fails t.
func Backends(t *testing.T) []Backend {
	var out []Backend
	for _, isa := range cpu.ISAs() {
		out = append(out, Backend{Name: isa, DeviceType: core.DeviceCPU, ISA: isa})
	}
	required, err := requiredBackends(os.Getenv("MC_REQUIRE_BACKENDS"))
	if err != nil {
		t.Fatal(err)
	}
	if n, err := cuda.Devices(); err != nil || n == 0 {
		if required["cuda"] {
			t.Fatalf("MC_REQUIRE_BACKENDS names cuda, but there is no CUDA device: %v", err)
		}
		t.Logf("no CUDA run: %v", err)
		return out
	}
	if required["cuda"] {
		if err := cuda.Prepare(0); err != nil {
			t.Fatalf("MC_REQUIRE_BACKENDS names cuda, but its kernels do not load: %v", err)
		}
	}
	return append(out, CUDA)
}

// ForEachBackend runs f once per backend of Backends, as a subtest named
// after it, with the backend's CPU implementation active: one suite for
// every backend.
func ForEachBackend(t *testing.T, f func(t *testing.T, b Backend)) {
	defer cpu.Use(cpu.ISAs()[0])
	for _, b := range Backends(t) {
		if b.ISA != "" {
			if err := cpu.Use(b.ISA); err != nil {
				t.Fatal(err)
			}
		}
		t.Run(b.Name, func(t *testing.T) { f(t, b) })
	}
}

// requiredBackends parses MC_REQUIRE_BACKENDS.
func requiredBackends(list string) (map[string]bool, error) {
	out := map[string]bool{}
	for _, name := range strings.Split(list, ",") {
		switch name = strings.TrimSpace(name); name {
		case "":
		case "cpu", "cuda":
			out[name] = true
		default:
			return nil, fmt.Errorf("MC_REQUIRE_BACKENDS: unknown backend %q (known: cpu, cuda)", name)
		}
	}
	return out, nil
}

// Rows splits row-major values into rows of width cols.
func Rows(v []float64, cols int) [][]float64 {
	var rows [][]float64
	for i := 0; i+cols <= len(v) && cols > 0; i += cols {
		rows = append(rows, v[i:i+cols])
	}
	return rows
}

// RNG is a freshly seeded generator; the seed is logged on failure so a failure can be
// replayed with MC_TEST_SEED=<seed>.
func RNG(t testing.TB) *rand.Rand {
	seed := rand.Uint64()
	if s, err := strconv.ParseUint(os.Getenv("MC_TEST_SEED"), 10, 64); err == nil {
		seed = s
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("seed %d", seed)
		}
	})
	return rand.New(rand.NewPCG(seed, 0x6d63))
}

// Shapes are the row shapes every row op is tested on: one row, one column,
// odd and prime widths, widths around the vector widths and the chunk,
// rows wider than 8192, and 3-D inputs.
var Shapes = [][]int64{
	{1, 1}, {1, 7}, {5, 1}, {3, 8}, {2, 15}, {4, 16}, {3, 17}, {2, 31}, {3, 32}, {2, 33},
	{7, 61}, {2, 127}, {1, 1000}, {3, 1024}, {2, 1031}, {2, 2049}, {1, 8192}, {2, 9001},
	{2, 3, 40}, {3, 1, 5, 24}, {64, 96},
}

// Case is one configuration of a row or elementwise op test.
type Case struct {
	Backend Backend
	DT      core.DType
	Shape   []int64
	Strided bool // tensors get padded rows and an odd byte_offset
	InPlace bool // the output is passed as its matching input
}

func (c Case) String() string {
	return fmt.Sprintf("%s %s %v strided=%v inplace=%v", c.Backend.Name, c.DT, c.Shape, c.Strided, c.InPlace)
}

// New makes a poisoned tensor of the case's dtype (dt 0) or of dt, laid out
// as the case says.
func (c Case) New(shape []int64, dt core.DType) *Tensor {
	if dt == 0 {
		dt = c.DT
	}
	if c.Strided {
		return c.Backend.New(dt, shape, RowPad(3), Offset(1))
	}
	return c.Backend.New(dt, shape)
}

// NonContiguous reports whether the case's Strided layout really leaves
// gaps (it does not for a single row).
func (c Case) NonContiguous() bool {
	return c.Strided && len(c.Shape) >= 2 && c.Rows() > 1
}

// Rows and Cols of the case's shape.
func (c Case) Cols() int { return int(c.Shape[len(c.Shape)-1]) }
func (c Case) Rows() int {
	n := 1
	for _, s := range c.Shape[:len(c.Shape)-1] {
		n *= int(s)
	}
	return n
}

// Cases runs f for every backend and CPU implementation × dtype × shape ×
// layout.
func Cases(t *testing.T, shapes [][]int64, f func(t *testing.T, c Case)) {
	ForEachBackend(t, func(t *testing.T, b Backend) {
		for _, dt := range DTypes {
			for _, sh := range shapes {
				for _, l := range []Case{{}, {Strided: true}, {InPlace: true}} {
					l.Backend, l.DT, l.Shape = b, dt, sh
					f(t, l)
				}
			}
		}
	})
}

// PaddingPoisoned reports whether every byte outside the tensor's elements
// still holds the poison written by New.
func (t *Tensor) PaddingPoisoned() bool {
	t.pull()
	b := unsafe.Slice((*byte)(t.base), len(t.mem)*8)
	used := make([]bool, len(b))
	es := t.DT.Size()
	for _, off := range t.offsets() {
		for k := 0; k < es; k++ {
			used[int(t.T.ByteOffset)+off*es+k] = true
		}
	}
	for i, v := range b {
		if !used[i] && v != []byte{0xc0, 0x7f}[i%2] {
			return false
		}
	}
	return true
}

// Status is the status of err, failing t when err is not a *core.Error or
// nil.
func Status(t testing.TB, err error) core.Status {
	t.Helper()
	if _, ok := err.(*core.Error); err != nil && !ok {
		t.Fatalf("error %v is not a *core.Error", err)
	}
	return core.StatusOf(err)
}

// SyncEvery drains the GPU's queue every 256th iteration i of a benchmark,
// untimed, so that a full launch queue does not turn the GPU's time into
// the host's.
func SyncEvery(b *testing.B, i int) {
	if i%256 == 255 {
		b.StopTimer()
		must(cuda.Sync())
		b.StartTimer()
	}
}
