package ops_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"metalcore/backend/metal"
	"metalcore/internal/core"
	"metalcore/ops/activation"
	"metalcore/ops/adamw"
	"metalcore/ops/norm"
	"metalcore/ops/qr"
	"metalcore/ops/softmax"
)

// fakeEncoder stands for the host's id<MTLComputeCommandEncoder> (outside
// Go's heap, as Objective-C objects are).
var fakeEncoder = unsafe.Add(nil, 0xe0000)

// recorder is a Metal runtime that records what it is asked to encode,
// checking buffers as the darwin runtime does (metal.CheckBuffers) over
// fake buffers of known lengths.
type recorder struct {
	lengths    map[unsafe.Pointer]uint64
	next       uintptr
	maxThreads int
	encoded    [][]metal.Command
}

func useRecorder(t *testing.T) *recorder {
	r := &recorder{lengths: map[unsafe.Pointer]uint64{}, next: 0x1000000, maxThreads: 1024}
	metal.Use(r)
	t.Cleanup(func() { metal.Use(nil) })
	return r
}

func (r *recorder) Available() error { return nil }
func (r *recorder) MaxThreads(enc unsafe.Pointer, kernel string) (int, error) {
	if enc != fakeEncoder {
		return 0, fmt.Errorf("asked about encoder %p", enc)
	}
	return r.maxThreads, nil
}
func (r *recorder) GPUAddress(b unsafe.Pointer) (uint64, error) { return uint64(uintptr(b)) << 16, nil }
func (r *recorder) Prepare(unsafe.Pointer) error                { return nil }
func (r *recorder) Encode(enc unsafe.Pointer, cmds []metal.Command) error {
	if enc != fakeEncoder {
		return fmt.Errorf("encoding on %p", enc)
	}
	err := metal.CheckBuffers(cmds, func(b unsafe.Pointer) uint64 { return r.lengths[b] },
		func(b unsafe.Pointer) bool { _, ok := r.lengths[b]; return ok })
	if err == nil {
		r.encoded = append(r.encoded, cmds)
	}
	return err
}

// tensor is a Metal tensor in a buffer of its own at byte offset `offset`,
// the buffer exactly as long as the view needs (nil for a nil shape).
func (r *recorder) tensor(dt core.DType, offset uint64, shape ...int64) *core.Tensor {
	if shape == nil {
		return nil
	}
	n := int64(1)
	for _, s := range shape {
		n *= s
	}
	buf := unsafe.Add(nil, r.next)
	r.next += 0x10000
	r.lengths[buf] = offset + uint64(n)*uint64(dt.Size())
	t := &core.Tensor{Data: buf, DeviceType: core.DeviceMetal, NDim: int32(len(shape)), Lanes: 1, ByteOffset: offset,
		Shape: &append([]int64(nil), shape...)[0]}
	t.Code, t.Bits = 2, uint8(8*dt.Size())
	if dt == core.BF16 {
		t.Code = 4
	}
	return t
}

// last is the command list of the last call, which must have encoded one.
func (r *recorder) last(t *testing.T, before int) []metal.Command {
	require.Len(t, r.encoded, before+1, "one plan encoded")
	return r.encoded[before]
}

// signature is a kernel's entry as the MSL program declares it.
type signature struct {
	maxThreads int
	params     map[int]mslParam // by [[buffer(i)]]
	dynamic    bool
}

type mslParam struct {
	typ, name     string
	pointer, read bool
}

var (
	entryLine = regexp.MustCompile(`(?m)^(?:\[\[max_total_threads_per_threadgroup\((\d+)\)\]\] )?kernel void (\w+)\((.*)\) \{$`)
	bufParam  = regexp.MustCompile(`^(.*) (\w+) \[\[buffer\((\d+)\)\]\]$`)
)

// signatures reads every kernel's entry from the MSL programs of the op
// families (independently of the plan's own reading of the sources).
func signatures(t *testing.T) map[string]signature {
	files, err := filepath.Glob("*/*.cu")
	require.NoError(t, err)
	out := map[string]signature{}
	for _, f := range files {
		src, err := os.ReadFile(f)
		require.NoError(t, err)
		prog, _, err := metal.Program(string(src))
		require.NoError(t, err)
		for _, m := range entryLine.FindAllStringSubmatch(prog, -1) {
			sig := signature{params: map[int]mslParam{}}
			if m[1] != "" {
				sig.maxThreads, _ = strconv.Atoi(m[1])
			}
			for _, p := range strings.Split(m[3], ", ") {
				if strings.Contains(p, "[[threadgroup(0)]]") {
					sig.dynamic = true
				}
				pm := bufParam.FindStringSubmatch(p)
				if pm == nil {
					continue
				}
				i, _ := strconv.Atoi(pm[3])
				require.NotContains(t, sig.params, i, "%s: two parameters at buffer(%d)", m[2], i)
				ptr := strings.Contains(pm[1], "*")
				sig.params[i] = mslParam{typ: pm[1], name: strings.TrimPrefix(pm[2], "mc_p_"), pointer: ptr,
					read: ptr && regexp.MustCompile(`\bconst\b`).MatchString(pm[1])}
			}
			out[m[2]] = sig
		}
	}
	require.NotEmpty(t, out)
	return out
}

// checkPlan holds a call's commands to Metal's rules and the MSL entries:
// every buffer(i) of the kernel bound once, a buffer where the entry takes
// a pointer and inline bytes of the parameter's size where it takes a
// value, inline bytes within 4 KB, threadgroups in whole SIMD groups up to
// 1024 and the kernel's declared maximum, threadgroup memory within 32 KB
// and only where the entry declares it, and a barrier between any command
// and a later one that touches what it wrote (or writes what it read).
func checkPlan(t *testing.T, sigs map[string]signature, cmds []metal.Command) {
	t.Helper()
	type access struct {
		buf    unsafe.Pointer
		lo, hi uint64
		write  bool
	}
	accesses := make([][]access, len(cmds))
	for ci, c := range cmds {
		sig, ok := sigs[c.Kernel]
		require.True(t, ok, "no MSL entry %s", c.Kernel)
		seen := map[int]bool{}
		for _, b := range c.Buffers {
			p, ok := sig.params[b.Index]
			require.True(t, ok && p.pointer, "%s: buffer at %d, where the entry has %+v", c.Kernel, b.Index, p)
			require.Equal(t, !p.read && !b.Absent, b.Write, "%s: %s written", c.Kernel, p.name)
			require.False(t, seen[b.Index], "%s: buffer(%d) bound twice", c.Kernel, b.Index)
			seen[b.Index] = true
			if b.Buffer != nil {
				require.LessOrEqual(t, b.Lo, b.Offset, "%s: %s starts before its offset", c.Kernel, p.name)
				accesses[ci] = append(accesses[ci], access{b.Buffer, b.Lo, b.Hi, b.Write})
			}
		}
		for _, v := range c.Values {
			p, ok := sig.params[v.Index]
			require.True(t, ok && !p.pointer, "%s: bytes at %d, where the entry has %+v", c.Kernel, v.Index, p)
			require.False(t, seen[v.Index], "%s: buffer(%d) bound twice", c.Kernel, v.Index)
			seen[v.Index] = true
			require.LessOrEqual(t, len(v.Data), metal.MaxInlineBytes, c.Kernel)
			typ := strings.TrimSuffix(strings.TrimPrefix(p.typ, "constant "), "&")
			if n := metal.ValueSize(typ); n != 0 {
				require.Equal(t, n, len(v.Data), "%s: %s %s", c.Kernel, typ, p.name)
			}
		}
		require.Len(t, seen, len(sig.params), "%s: every parameter bound", c.Kernel)
		for _, r := range c.Resources {
			accesses[ci] = append(accesses[ci], access{r.Buffer, r.Lo, r.Hi, r.Write})
		}
		require.Positive(t, c.Groups, c.Kernel)
		require.True(t, c.Threads <= metal.MaxGroupThreads && (c.Threads%metal.SIMDWidth == 0 || c.Threads < metal.SIMDWidth),
			"%s: %d threads", c.Kernel, c.Threads)
		if sig.maxThreads > 0 {
			require.LessOrEqual(t, c.Threads, sig.maxThreads, c.Kernel)
		}
		require.LessOrEqual(t, c.GroupMemory, metal.MaxGroupMemory, c.Kernel)
		require.Equal(t, sig.dynamic, c.GroupMemory > 0, "%s: threadgroup memory %d", c.Kernel, c.GroupMemory)
	}
	for j := range cmds {
		for i := range j {
			conflict := false
			for _, a := range accesses[i] {
				for _, b := range accesses[j] {
					if a.buf == b.buf && a.lo < b.hi && b.lo < a.hi && (a.write || b.write) {
						conflict = true
					}
				}
			}
			if !conflict {
				continue
			}
			barrier := false
			for k := i + 1; k <= j; k++ {
				barrier = barrier || cmds[k].Barrier
			}
			require.True(t, barrier, "%s (%d) touches what %s (%d) wrote or read, with no barrier between", cmds[j].Kernel, j,
				cmds[i].Kernel, i)
		}
	}
}

// writes reports whether the commands write all of t's view.
func writes(cmds []metal.Command, t *core.Tensor, bytes uint64) bool {
	lo, hi := t.ByteOffset, t.ByteOffset+bytes
	for _, c := range cmds {
		for _, b := range c.Buffers {
			if b.Buffer == t.Data && b.Write && b.Lo <= lo && b.Hi >= hi {
				return true
			}
		}
		for _, r := range c.Resources {
			if r.Buffer == t.Data && r.Write && r.Lo <= lo && r.Hi >= hi {
				return true
			}
		}
	}
	return false
}

func elems(shape []int64) uint64 {
	n := uint64(1)
	for _, s := range shape {
		n *= uint64(s)
	}
	return n
}

var planShapes = [][]int64{{1, 1}, {3, 5}, {2, 33}, {7, 4099}, {2, 3, 256}, {2, 70000}}

// Every op's Metal plan, for every dtype and shapes from one element to
// rows wider than a threadgroup covers: bindings as the MSL entries
// declare them, Metal's limits, barriers between dependent dispatches, a
// threadgroup a row for the row kernels, and the outputs written.
func TestMetalPlans(t *testing.T) {
	r := useRecorder(t)
	sigs := signatures(t)
	for _, dt := range []core.DType{core.F32, core.F16, core.BF16} {
		for _, sh := range planShapes {
			rows, cols := int64(elems(sh)/uint64(sh[len(sh)-1])), sh[len(sh)-1]
			name := fmt.Sprintf("%s %v", dt, sh)
			off := uint64(64) // every view at an offset into its buffer
			x, res, dy := r.tensor(dt, off, sh...), r.tensor(dt, off, sh...), r.tensor(dt, off, sh...)
			w, b := r.tensor(dt, off, cols), r.tensor(dt, off, cols)
			y, ro, dx := r.tensor(dt, off, sh...), r.tensor(dt, off, sh...), r.tensor(dt, off, sh...)
			stat := func() *core.Tensor { return r.tensor(core.F32, off, rows) }
			rowBytes := elems(sh) * uint64(dt.Size())
			rowCall := func(what string, call func() error, outs ...*core.Tensor) []metal.Command {
				before := len(r.encoded)
				require.NoError(t, call(), "%s %s", what, name)
				cmds := r.last(t, before)
				checkPlan(t, sigs, cmds)
				for _, o := range outs {
					require.True(t, writes(cmds, o, rowBytes), "%s %s writes its output", what, name)
				}
				return cmds
			}
			cmds := rowCall("rmsnorm", func() error { return norm.RMSNormFwd(x, w, 1e-6, y, stat(), fakeEncoder) }, y)
			require.EqualValues(t, rows, cmds[0].Groups, "a threadgroup a row")
			rowCall("rmsnorm without weight or rstd", func() error { return norm.RMSNormFwd(x, nil, 1e-6, y, nil, fakeEncoder) }, y)
			rowCall("fused add", func() error { return norm.FusedAddRMSNormFwd(x, res, w, 1e-6, y, ro, stat(), fakeEncoder) }, y, ro)
			rowCall("fused add in place", func() error { return norm.FusedAddRMSNormFwd(x, res, w, 1e-6, y, res, nil, fakeEncoder) }, y, res)
			rowCall("layernorm", func() error { return norm.LayerNormFwd(x, w, b, 1e-5, y, stat(), stat(), fakeEncoder) }, y)
			mean, rstd := stat(), stat()
			wsBytes, err := norm.LayerNormBwdWorkspace(x)
			require.NoError(t, err)
			ws := r.tensor(core.F32, 0, max(int64(wsBytes/4), 1))
			dw, db := r.tensor(dt, 0, cols), r.tensor(dt, 0, cols)
			cmds = rowCall("layernorm backward", func() error {
				return norm.LayerNormBwd(dy, x, w, mean, rstd, dx, dw, db, ws, fakeEncoder)
			}, dx)
			require.Len(t, cmds, 2, "the backward and one column sum for both gradients")
			require.True(t, writes(cmds, dw, uint64(cols)*uint64(dt.Size())) && writes(cmds, db, uint64(cols)*uint64(dt.Size())))
			require.True(t, cmds[1].Barrier, "the column sum reads the backward's partials")
			cmds = rowCall("rmsnorm backward without dweight", func() error {
				return norm.RMSNormBwd(dy, x, w, rstd, dx, nil, nil, fakeEncoder)
			}, dx)
			require.Len(t, cmds, 1)
			require.EqualValues(t, rows, cmds[0].Groups)
			rowCall("softmax", func() error { return softmax.Fwd(x, y, fakeEncoder) }, y)
			rowCall("softmax backward", func() error { return softmax.Bwd(dy, y, dx, fakeEncoder) }, dx)
			for _, form := range []int32{activation.GeluErf, activation.GeluTanh} {
				cmds = rowCall("gelu", func() error { return activation.GeluFwd(x, form, y, fakeEncoder) }, y)
				require.True(t, uint64(cmds[0].Groups*cmds[0].Threads*8) >= elems(sh) || cmds[0].Groups == 1<<16)
				rowCall("gelu backward", func() error { return activation.GeluBwd(dy, x, form, dx, fakeEncoder) }, dx)
			}
			rowCall("silu", func() error { return activation.SiluFwd(x, y, fakeEncoder) }, y)
			rowCall("silu backward", func() error { return activation.SiluBwd(dy, x, dx, fakeEncoder) }, dx)
			if dt != core.F32 {
				y32 := r.tensor(core.F32, off, sh...)
				before := len(r.encoded)
				require.NoError(t, softmax.Fwd(x, y32, fakeEncoder))
				require.True(t, writes(r.last(t, before), y32, elems(sh)*4))
			}
		}
	}
}

// Row kernels take threadgroups no larger than the pipeline allows on the
// device (which may be under 1024 for a kernel of many registers), in
// whole SIMD groups, as CUDA launches are clamped to a kernel's registers.
func TestMetalThreadsClampedToThePipeline(t *testing.T) {
	r := useRecorder(t)
	r.maxThreads = 200
	x, y := r.tensor(core.F32, 0, 2, 65536), r.tensor(core.F32, 0, 2, 65536)
	require.NoError(t, softmax.Fwd(x, y, fakeEncoder))
	require.Equal(t, 192, r.last(t, 0)[0].Threads)
}

// AdamW's tensor tables go inline, 64 tensors a dispatch (3,680 bytes of
// the 4 KB setBytes takes), holding the tensors' GPU addresses; every
// buffer they name is made resident with the right usage; the chunks touch
// different tensors, so no barrier separates them.
func TestMetalAdamWPlan(t *testing.T) {
	r := useRecorder(t)
	sigs := signatures(t)
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 64, 65, 130} {
		for _, amsgrad := range []bool{false, true} {
			sizes := make([]int64, n)
			var params, grads, ms, vs, vmaxs []*core.Tensor
			blocks := 0
			for i := range sizes {
				sizes[i] = 1 + rng.Int64N(9000)
				blocks += int(sizes[i]+4095) / 4096
				params = append(params, r.tensor(core.BF16, 128, sizes[i]))
				grads = append(grads, r.tensor(core.BF16, 0, sizes[i]))
				ms = append(ms, r.tensor(core.F32, 16, sizes[i]))
				vs = append(vs, r.tensor(core.F32, 0, sizes[i]))
				vmaxs = append(vmaxs, r.tensor(core.F32, 0, sizes[i]))
			}
			list := func(ts []*core.Tensor) unsafe.Pointer { return unsafe.Pointer(&ts[0]) }
			l := adamw.Lists{N: int64(n), Params: list(params), Grads: list(grads), ExpAvgs: list(ms), ExpAvgSqs: list(vs)}
			if amsgrad {
				l.MaxExpAvgSqs = list(vmaxs)
			}
			cfg := adamw.Config{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, Step: 3, AMSGrad: map[bool]int32{true: 1}[amsgrad]}
			scale, inf, steps := r.tensor(core.F32, 0, 1), r.tensor(core.F32, 0, 1), r.tensor(core.F32, 0, int64(n))
			before := len(r.encoded)
			require.NoError(t, adamw.StepCapturable(&cfg, l, adamw.Scaling{GradScale: scale, FoundInf: inf},
				adamw.Capture{Steps: steps}, fakeEncoder))
			cmds := r.last(t, before)
			checkPlan(t, sigs, cmds)
			require.Len(t, cmds, (n+63)/64)
			total := 0
			for _, c := range cmds {
				total += c.Groups
				require.False(t, c.Barrier)
				require.Len(t, c.Values, 1, "the table alone: adamw_step takes no pointer")
				require.Equal(t, 8*(7*64+12), len(c.Values[0].Data))
			}
			require.Equal(t, blocks, total, "a threadgroup per 4096 elements of every tensor")
			for i := range n {
				bytes := uint64(sizes[i])
				require.True(t, writes(cmds, params[i], 2*bytes) && writes(cmds, ms[i], 4*bytes) && writes(cmds, vs[i], 4*bytes))
				require.Equal(t, amsgrad, writes(cmds, vmaxs[i], 4*bytes))
			}
			// the first tensor's param address: its buffer's GPU address
			// plus its offset, in the first word of the param array
			data := cmds[0].Values[0].Data
			word := func(i int) uint64 {
				var v uint64
				for k := range 8 {
					v |= uint64(data[8*i+k]) << (8 * k)
				}
				return v
			}
			require.Equal(t, uint64(uintptr(params[0].Data))<<16+128, word(64))
			require.Equal(t, uint64(uintptr(ms[0].Data))<<16+16, word(2*64))
		}
	}
}

// QR's Metal schedule: qr_cols for matrices whose reflectors fit 32 KB of
// threadgroup memory, else the blocked path in the workspace, its panel one
// threadgroup a matrix (Metal promises no co-residency) and every step
// after a barrier where it reads the one before.
func TestMetalQRPlan(t *testing.T) {
	r := useRecorder(t)
	sigs := signatures(t)
	for _, c := range []struct {
		batch, m, n int64
		mode        int32
		blocked     bool
	}{
		{3, 5, 4, qr.Reduced, false}, {2, 64, 64, qr.Complete, false}, {1, 100, 60, qr.Reduced, false},
		{2, 100, 100, qr.Reduced, true}, {1, 300, 200, qr.Complete, true}, {3, 70, 130, qr.ROnly, true},
	} {
		name := fmt.Sprintf("%+v", c)
		k := min(c.m, c.n)
		a := r.tensor(core.F32, 0, c.batch, c.m, c.n)
		var q *core.Tensor
		qCols, rRows := k, k
		if c.mode == qr.Complete {
			qCols, rRows = c.m, c.m
		}
		if c.mode != qr.ROnly {
			q = r.tensor(core.F32, 32, c.batch, c.m, qCols)
		}
		rt := r.tensor(core.F32, 0, c.batch, rRows, c.n)
		bytes, err := qr.WorkspaceSize(a, c.mode)
		require.NoError(t, err)
		require.Equal(t, c.blocked, bytes > 0, name)
		var ws *core.Tensor
		if bytes > 0 {
			ws = r.tensor(core.F32, 0, bytes/4)
			short := r.tensor(core.F32, 0, bytes/4-1)
			require.Error(t, qr.QR(a, c.mode, q, rt, short, fakeEncoder), "a short workspace")
		}
		before := len(r.encoded)
		require.NoError(t, qr.QR(a, c.mode, q, rt, ws, fakeEncoder), name)
		cmds := r.last(t, before)
		checkPlan(t, sigs, cmds)
		if q != nil {
			require.True(t, writes(cmds, q, uint64(c.batch*c.m*qCols*4)), name)
		}
		require.True(t, writes(cmds, rt, uint64(c.batch*rRows*c.n*4)), name)
		if !c.blocked {
			require.Len(t, cmds, 1)
			require.EqualValues(t, c.batch, cmds[0].Groups, "a threadgroup a matrix")
			continue
		}
		panels := 0
		for _, cmd := range cmds {
			if strings.HasPrefix(cmd.Kernel, "qr_panel") {
				panels++
				require.EqualValues(t, c.batch, cmd.Groups, "%s: a panel is one threadgroup a matrix", name)
			}
		}
		require.Equal(t, int(k+31)/32, panels, name)
	}
}

// A Metal call refused by the runtime's buffer check (a buffer shorter
// than its view, or one of another device) encodes nothing.
func TestMetalBufferCheckedBeforeEncoding(t *testing.T) {
	r := useRecorder(t)
	x, y := r.tensor(core.F32, 0, 4, 8), r.tensor(core.F32, 0, 4, 8)
	r.lengths[y.Data] = 100
	err := softmax.Fwd(x, y, fakeEncoder)
	require.Equal(t, core.ErrInvalidArgument, core.StatusOf(err), "%v", err)
	require.ErrorContains(t, err, "is 100 bytes long, the tensor's view reaches byte 128")
	delete(r.lengths, y.Data)
	require.ErrorContains(t, softmax.Fwd(x, y, fakeEncoder), "not memory of the encoder's device")
	require.Empty(t, r.encoded)
	require.ErrorContains(t, softmax.Fwd(x, x, nil), "encoder is NULL")
}
