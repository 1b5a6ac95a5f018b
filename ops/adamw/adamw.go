// Package adamw is the multi-tensor AdamW step with float32 optimizer state:
// validation of the whole tensor list before anything is written, the CPU
// kernel, and the float64 reference the tests use.
package adamw

import (
	"math"
	"slices"
	"strconv"
	"sync"
	"unsafe"

	"metalcore/backend/cpu"
	"metalcore/backend/cpu/simd"
	"metalcore/internal/core"
)

// Config mirrors mc_adamw_config.
type Config struct {
	LR, Beta1, Beta2, Eps, WeightDecay float64
	Step                               int64
	AMSGrad, Maximize                  int32
}

// checkConfig rejects what torch.optim.AdamW rejects, plus what its step
// cannot use: a step number below 1, NaN or infinite values. eps = 0 is
// PyTorch's too (a zero second moment then gives a NaN or infinite step).
func checkConfig(c *Config) error {
	if c == nil {
		return core.Errorf(core.ErrInvalidArgument, "cfg is NULL")
	}
	bad := func(name string, v float64, ok bool) error {
		if ok && !math.IsNaN(v) && !math.IsInf(v, 0) {
			return nil
		}
		return core.Errorf(core.ErrInvalidArgument, "invalid %s value: %g", name, v)
	}
	for _, e := range []error{
		bad("learning rate", c.LR, c.LR >= 0),
		bad("beta parameter at index 0", c.Beta1, c.Beta1 >= 0 && c.Beta1 < 1),
		bad("beta parameter at index 1", c.Beta2, c.Beta2 >= 0 && c.Beta2 < 1),
		bad("epsilon", c.Eps, c.Eps >= 0),
		bad("weight_decay", c.WeightDecay, c.WeightDecay >= 0),
	} {
		if e != nil {
			return e
		}
	}
	if c.Step < 1 {
		return core.Errorf(core.ErrInvalidArgument, "invalid step: %d (the first step is 1)", c.Step)
	}
	return nil
}

// scalars are the step's float32 constants, each computed in float64 and
// rounded once, as PyTorch computes them in Python (1 - beta2 formed from
// float32(beta2) is 1.3e-5 off, a bias on every step).
func scalars(c *Config) simd.AdamW {
	bc1 := 1 - math.Pow(c.Beta1, float64(c.Step))
	bc2 := 1 - math.Pow(c.Beta2, float64(c.Step))
	sign := float32(1)
	if c.Maximize != 0 {
		sign = -1
	}
	return simd.AdamW{
		Sign: sign, Decay: float32(1 - c.LR*c.WeightDecay),
		OneMinusBeta1: float32(1 - c.Beta1), Beta2: float32(c.Beta2), OneMinusBeta2: float32(1 - c.Beta2),
		StepSize: float32(c.LR / bc1), BC2Sqrt: float32(math.Sqrt(bc2)), Eps: float32(c.Eps),
	}
}

// group is one parameter's tensors, validated: n elements each, params and
// grads of dtype dt, the state float32 (vmax nil unless amsgrad).
type group struct {
	p, g, m, v, vmax unsafe.Pointer
	// Metal: the byte offsets of g, p, m, v and vmax into their buffers
	// (ptr's order)
	off [5]uint64
	n   int
	dt  core.DType
}

// MaxTensors bounds n_tensors before anything is sized by it: a call's
// bookkeeping is about 150 bytes a tensor, and a model has thousands of
// parameter tensors, not millions.
const MaxTensors = 1 << 20

// Lists are the tensor lists of one call (max nil unless amsgrad).
type Lists struct {
	N                  int64
	Params, Grads      unsafe.Pointer // mc_tensor* const*
	ExpAvgs, ExpAvgSqs unsafe.Pointer
	MaxExpAvgSqs       unsafe.Pointer
}

func at(list unsafe.Pointer, i int) *core.Tensor {
	return *(**core.Tensor)(unsafe.Add(list, i*int(unsafe.Sizeof(uintptr(0)))))
}

// scratch is one call's validated lists, reused through scratchPool (a
// 5,000-tensor list is 20,000 tensors: allocating and collecting per-call
// buffers cost as much as checking them). Each tensor is checked into a view
// on the checking goroutine's stack; only what the step needs is kept.
type scratch struct {
	groups  []group
	extents []extent         // one per tensor, list-major within a parameter
	sorted  []extent         // extents sorted by start
	spare   []extent         // sortByStart's second buffer
	buffers []unsafe.Pointer // Metal: each tensor's MTLBuffer, by extent index
	device  struct{ typ, id int32 }
}

// extent is a tensor's bytes [lo, hi) ([0, 0) when it is empty), at its
// index: parameter at/nl of list at%nl.
type extent struct {
	lo, hi uintptr
	at     int
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// grow is s with length n, reallocated only when its capacity is short.
func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// validate checks every tensor of the call before anything is written; a
// failure names the list and the index. The groups live in sc.
func validate(c *Config, l Lists, enc unsafe.Pointer, sc *scratch) ([]group, error) {
	if err := checkConfig(c); err != nil {
		return nil, err
	}
	if l.N < 0 || l.N > MaxTensors {
		return nil, core.Errorf(core.ErrInvalidArgument, "n_tensors is %d (must be 0..%d)", l.N, MaxTensors)
	}
	if l.N == 0 {
		return nil, nil
	}
	lists := []struct {
		name string
		ptr  unsafe.Pointer
	}{{"params", l.Params}, {"grads", l.Grads}, {"exp_avgs", l.ExpAvgs}, {"exp_avg_sqs", l.ExpAvgSqs}}
	if c.AMSGrad != 0 {
		lists = append(lists, struct {
			name string
			ptr  unsafe.Pointer
		}{"max_exp_avg_sqs", l.MaxExpAvgSqs})
	} else if l.MaxExpAvgSqs != nil {
		return nil, core.Errorf(core.ErrInvalidArgument, "max_exp_avg_sqs is given but amsgrad is off")
	}
	for _, li := range lists {
		if li.ptr == nil {
			return nil, core.Errorf(core.ErrInvalidArgument, "%s is NULL", li.name)
		}
	}
	nl := len(lists)
	sc.groups = grow(sc.groups, int(l.N))
	sc.extents = grow(sc.extents, int(l.N)*nl)
	groups, extents := sc.groups, sc.extents
	var buffers []unsafe.Pointer
	// every tensor must be on the first one's device
	first := core.View{Name: "params[0]"}
	if t := at(l.Params, 0); t != nil {
		first.DeviceType, first.DeviceID = t.DeviceType, t.DeviceID
	}
	if first.DeviceType == core.DeviceMetal {
		sc.buffers = grow(sc.buffers, len(extents))
		buffers = sc.buffers
	}
	// one parameter's tensors: checked, and a failure named by list and index
	check := func(i int) error {
		var vs [5]core.View
		for k, li := range lists {
			v := &vs[k]
			if err := checkOne(v, li.name, at(li.ptr, i), k, &vs[0]); err != nil {
				// built only on failure
				var scratchView core.View
				named := core.Check(&scratchView, li.name+"["+strconv.Itoa(i)+"]", at(li.ptr, i))
				if named == nil {
					named = core.Errorf(core.StatusOf(err), "%s[%d]: %v", li.name, i, err)
				}
				return named
			}
			if err := core.SameDevice(&first, v); err != nil {
				return core.Errorf(core.StatusOf(err), "%s[%d]: %v", li.name, i, err)
			}
			e := extent{at: i*nl + k}
			if v.N > 0 {
				e.lo, e.hi = v.Extent()
			}
			extents[i*nl+k] = e
			if buffers != nil {
				buffers[i*nl+k] = v.Buffer
			}
		}
		if err := core.SameDType(&vs[0], &vs[1]); err != nil {
			return core.Errorf(core.StatusOf(err), "grads[%d] is %s but params[%d] is %s (mixed dtypes)", i, vs[1].DType, i, vs[0].DType)
		}
		groups[i] = group{p: vs[0].Base, g: vs[1].Base, m: vs[2].Base, v: vs[3].Base, n: vs[0].N, dt: vs[0].DType,
			off: [5]uint64{vs[1].Offset, vs[0].Offset, vs[2].Offset, vs[3].Offset}}
		if nl > 4 {
			groups[i].vmax, groups[i].off[4] = vs[4].Base, vs[4].Offset
		}
		return nil
	}
	// Long lists are checked by the worker pool; the error reported is the
	// one of the lowest index, as a serial check would find it.
	var mu sync.Mutex
	firstBad, firstErr := len(groups), error(nil)
	cpu.Parallel(len(groups), 256, func(lo, hi int, _ *cpu.Scratch) {
		for i := lo; i < hi; i++ {
			if err := check(i); err != nil {
				mu.Lock()
				if i < firstBad {
					firstBad, firstErr = i, err
				}
				mu.Unlock()
				return
			}
		}
	})
	if firstErr != nil {
		return nil, firstErr
	}
	if err := core.CheckEncoder(first.DeviceType, enc); err != nil {
		return nil, err
	}
	sc.device.typ, sc.device.id = first.DeviceType, first.DeviceID
	if buffers != nil {
		if err := separateBuffers(extents, buffers); err != nil {
			return nil, err
		}
	}
	names := func(at int) string { return lists[at%nl].name + "[" + strconv.Itoa(at/nl) + "]" }
	owned := func() error { return checkOwned(extents, buffers, first.DeviceType, first.DeviceID, names) }
	// Metal's extents no longer name their buffers: such a call is checked
	// in full every time
	return groups, noOverlap(extents, sc, names, owned, buffers == nil)
}

// Metal extents are offsets into their buffers; separateBuffers moves each
// buffer's into a range of its own (the buffer's index in the call above
// bufferShift), so that one sort finds overlaps within a buffer and none
// across buffers, and the other devices' path stays as it is.
const bufferShift = 40

func separateBuffers(es []extent, buffers []unsafe.Pointer) error {
	index := map[unsafe.Pointer]uintptr{}
	for i := range es {
		if es[i].hi == 0 { // empty: overlaps nothing
			continue
		}
		b, ok := index[buffers[es[i].at]]
		if !ok {
			b = uintptr(len(index))
			index[buffers[es[i].at]] = b
		}
		if es[i].hi > 1<<bufferShift || b >= 1<<(63-bufferShift) {
			return core.Errorf(core.ErrInvalidArgument, "a Metal tensor ends past byte %d of its buffer, or the call has over %d buffers",
				uint64(1)<<bufferShift, 1<<(63-bufferShift))
		}
		es[i].lo, es[i].hi = b<<bufferShift|es[i].lo, b<<bufferShift|es[i].hi
	}
	return nil
}

// checkOwned fails unless every tensor's memory belongs to the call's
// device (a check of the device's backend: none for the CPU), naming the
// lowest index that fails.
func checkOwned(es []extent, buffers []unsafe.Pointer, deviceType, deviceID int32, name func(at int) string) error {
	if !core.ChecksOwnership(deviceType) {
		return nil
	}
	var mu sync.Mutex
	firstBad, firstErr := len(es), error(nil)
	cpu.Parallel(len(es), 1024, func(lo, hi int, _ *cpu.Scratch) {
		for i := lo; i < hi; i++ {
			v := core.View{DeviceType: deviceType, DeviceID: deviceID, N: int(es[i].hi - es[i].lo)}
			if buffers != nil { // Metal: lo is no address; the backend is asked about the buffer
				v.Base = buffers[es[i].at]
			} else {
				v.Base = unsafe.Add(nil, es[i].lo)
			}
			if err := core.CheckOwned(&v); err != nil {
				mu.Lock()
				if es[i].at < firstBad {
					firstBad, firstErr = es[i].at, core.Errorf(core.ErrInvalidArgument, "%s%v", name(es[i].at), err)
				}
				mu.Unlock()
				return
			}
		}
	})
	return firstErr
}

// checkOne validates tensor t of list k into v: a descriptor of its own,
// contiguous, shaped like the param p, float32 for the state lists.
func checkOne(v *core.View, name string, t *core.Tensor, k int, p *core.View) error {
	if err := core.Check(v, name, t); err != nil {
		return err
	}
	if err := core.WantContiguous(v); err != nil {
		return err
	}
	if k > 0 {
		if err := core.SameShape(p, v); err != nil {
			return err
		}
	}
	if k >= 2 {
		if err := core.WantDType(v, core.F32); err != nil {
			return core.Errorf(core.ErrUnsupportedDType, "%s (optimizer state is float32 only)", err)
		}
	}
	return nil
}

// noOverlap rejects any two tensors of the call sharing memory: sorted by
// start, each must end before the next begins (empty tensors, [0, 0), sort
// first and overlap nothing), and then whatever owned rejects. name names a
// tensor by its index. A cacheable call with the extents of the last call
// that passed (a training loop passes the same tensors every step) passes
// without sorting or asking owned again.
func noOverlap(es []extent, sc *scratch, name func(at int) string, owned func() error, cacheable bool) error {
	if cacheable {
		lastPassed.Lock()
		same := slices.Equal(es, lastPassed.extents)
		lastPassed.Unlock()
		if same {
			return nil
		}
	}
	sorted := grow(sc.sorted, len(es))
	sc.sorted = sorted
	copy(sorted, es)
	sc.spare = grow(sc.spare, len(es))
	sortByStart(sorted, sc.spare)
	for i := 1; i < len(sorted); i++ {
		if sorted[i].lo < sorted[i-1].hi {
			return core.Errorf(core.ErrInvalidArgument, "%s overlaps %s", name(sorted[i].at), name(sorted[i-1].at))
		}
	}
	if err := owned(); err != nil {
		return err
	}
	if !cacheable {
		return nil
	}
	lastPassed.Lock()
	lastPassed.extents = append(lastPassed.extents[:0], es...)
	lastPassed.Unlock()
	return nil
}

// lastPassed holds the extents, in call order, of the last call noOverlap
// passed.
var lastPassed struct {
	sync.Mutex
	extents []extent
}

// sortByStart orders es by lo: a least-significant-digit radix sort, 11
// bits a pass over the bits in which the starts differ (a 20,000-tensor
// list in a fraction of a comparison sort's time); spare is as long as es.
func sortByStart(es, spare []extent) {
	if len(es) < 2 {
		return
	}
	var differ uintptr
	for _, e := range es {
		differ |= e.lo ^ es[0].lo
	}
	src, dst := es, spare
	const bits, mask = 11, 1<<11 - 1
	for shift := 0; differ>>shift != 0; shift += bits {
		var count [mask + 2]int
		for _, e := range src {
			count[(e.lo>>shift)&mask+1]++
		}
		for d := 1; d < len(count); d++ {
			count[d] += count[d-1]
		}
		for _, e := range src {
			d := (e.lo >> shift) & mask
			dst[count[d]] = e
			count[d]++
		}
		src, dst = dst, src
	}
	if &src[0] != &es[0] {
		copy(es, src)
	}
}

// Scaling is a mixed-precision step's optional arguments, as
// torch.amp.GradScaler hands them to PyTorch's fused AdamW: the gradients
// are divided by GradScale, and the whole step is skipped (nothing written)
// where FoundInf is nonzero. Each is a float32 tensor of one element on the
// call's device, or nil.
type Scaling struct{ GradScale, FoundInf *core.Tensor }

// views validates the scaling tensors against the call's device.
func (s Scaling) views(dev *core.View) (scale, inf *core.View, err error) {
	if s.GradScale != nil {
		if scale, err = deviceScalars(dev, "grad_scale", s.GradScale, 1); err != nil {
			return nil, nil, err
		}
	}
	if s.FoundInf != nil {
		inf, err = deviceScalars(dev, "found_inf", s.FoundInf, 1)
	}
	return scale, inf, err
}

// deviceScalars validates t as a contiguous float32 tensor of n elements on
// dev's device.
func deviceScalars(dev *core.View, name string, t *core.Tensor, n int) (*core.View, error) {
	v := new(core.View)
	if err := core.Check(v, name, t); err != nil {
		return nil, err
	}
	if err := core.WantDType(v, core.F32); err != nil {
		return nil, err
	}
	if v.N != n {
		return nil, core.Errorf(core.ErrInvalidArgument, "%s has %d elements, must have %d", name, v.N, n)
	}
	if err := core.WantContiguous(v); err != nil {
		return nil, err
	}
	if err := core.SameDevice(dev, v); err != nil {
		return nil, err
	}
	return v, core.CheckOwned(v)
}

// Capture is a capturable step's device-resident arguments (PyTorch's
// AdamW(capturable=True)): Steps, a float32 tensor of one element per
// tensor of the lists, holds each tensor's step number (the step being
// taken: the caller advances it before the call); LR, a float32 tensor of
// one element, or nil for the config's lr. Both on the call's device, read
// by the kernel, so a step captured in a CUDA graph replays with the values
// they hold then. The config's step is not used.
type Capture struct{ Steps, LR *core.Tensor }

// dynamic is a capturable step's validated arguments.
type dynamic struct {
	steps, lr                    *core.View
	lrValue, decay, beta1, beta2 float32 // lr (where lr is nil), weight decay, betas
}

// step takes the step on one device type: h the step's scalars, groups the
// validated tensors, scale and inf the optional gradient scaling, dyn the
// capturable step's arguments or nil (all on the call's device).
var step = core.NewDispatch[func(h *simd.AdamW, groups []group, dev int, scale, inf *core.View, dyn *dynamic, enc unsafe.Pointer) error]("adamw step")

// Step takes one AdamW step on every tensor of the lists.
func Step(c *Config, l Lists, enc unsafe.Pointer) error { return StepScaled(c, l, Scaling{}, enc) }

// StepScaled is Step with gradient scaling (s's tensors may be nil).
func StepScaled(c *Config, l Lists, s Scaling, enc unsafe.Pointer) error {
	return stepWith(c, l, s, nil, enc)
}

// StepCapturable is StepScaled with the step numbers and lr on the device.
func StepCapturable(c *Config, l Lists, s Scaling, cp Capture, enc unsafe.Pointer) error {
	if c != nil {
		withStep := *c
		withStep.Step = 1 // not used: each tensor's step comes from cp.Steps
		c = &withStep
	}
	return stepWith(c, l, s, &cp, enc)
}

func stepWith(c *Config, l Lists, s Scaling, cp *Capture, enc unsafe.Pointer) error {
	sc := scratchPool.Get().(*scratch)
	defer scratchPool.Put(sc)
	groups, err := validate(c, l, enc, sc)
	if err != nil {
		return err
	}
	dev := core.View{Name: "params[0]", DeviceType: sc.device.typ, DeviceID: sc.device.id}
	if len(groups) == 0 {
		dev.DeviceType = core.DeviceCPU
		if s.GradScale != nil {
			dev.DeviceType, dev.DeviceID = s.GradScale.DeviceType, s.GradScale.DeviceID
		}
	}
	scale, inf, err := s.views(&dev)
	if err != nil {
		return err
	}
	var dyn *dynamic
	if cp != nil {
		if dyn, err = cp.views(&dev, c, len(groups)); err != nil {
			return err
		}
	}
	if len(groups) == 0 {
		return nil
	}
	f, err := step.For(sc.device.typ)
	if err != nil {
		return err
	}
	h := scalars(c)
	return f(&h, groups, int(sc.device.id), scale, inf, dyn, enc)
}

// views validates a capturable step's tensors against the call's device and
// its n tensors.
func (cp *Capture) views(dev *core.View, c *Config, n int) (*dynamic, error) {
	d := &dynamic{lrValue: float32(c.LR), decay: float32(c.WeightDecay), beta1: float32(c.Beta1), beta2: float32(c.Beta2)}
	var err error
	if cp.Steps == nil {
		return nil, core.Errorf(core.ErrInvalidArgument, "steps is NULL")
	}
	if d.steps, err = deviceScalars(dev, "steps", cp.Steps, n); err != nil {
		return nil, err
	}
	if cp.LR != nil {
		if d.lr, err = deviceScalars(dev, "lr", cp.LR, 1); err != nil {
			return nil, err
		}
	}
	return d, nil
}
