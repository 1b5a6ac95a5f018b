// Package adamw is the multi-tensor AdamW step with float32 optimizer state:
// validation of the whole tensor list before anything is written, the CPU
// kernel, and the float64 reference the tests use.
package adamw

import (
	"math"
	"sort"
	"strconv"
	"sync"
	"unsafe"

	"metalcore/encoder/cpu"
	"metalcore/encoder/cpu/simd"
	"metalcore/internal/core"
)

// Config mirrors mc_adamw_config.
type Config struct {
	LR, Beta1, Beta2, Eps, WeightDecay float64
	Step                               int64
	AMSGrad, Maximize                  int32
}

// checkConfig rejects what torch.optim.AdamW rejects, plus what its step
// cannot use: a step number below 1, eps <= 0, NaN or infinite values.
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
		bad("epsilon", c.Eps, c.Eps > 0),
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

// scalars are the step's float32 constants, computed in float64 as PyTorch
// computes them in Python.
func scalars(c *Config) simd.AdamW {
	bc1 := 1 - math.Pow(c.Beta1, float64(c.Step))
	bc2 := 1 - math.Pow(c.Beta2, float64(c.Step))
	sign := float32(1)
	if c.Maximize != 0 {
		sign = -1
	}
	return simd.AdamW{
		Sign: sign, Decay: float32(1 - c.LR*c.WeightDecay), Beta1: float32(c.Beta1), Beta2: float32(c.Beta2),
		StepSize: float32(c.LR / bc1), InvBC2Sqrt: float32(1 / math.Sqrt(bc2)), Eps: float32(c.Eps),
	}
}

// group is one parameter's tensors, validated.
type group struct{ p, g, m, v, vmax *core.View }

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

// scratch holds one call's validated views; calls reuse it through
// scratchPool (a 5,000-tensor list is 20,000 views: allocating and
// collecting them each step cost as much as checking them).
type scratch struct {
	views   []core.View
	all     []*core.View
	groups  []group
	extents []extent
	spare   []extent // sortByStart's second buffer
}

// extent is a tensor's bytes [lo, hi), at is its index in the call's views.
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
	if l.N < 0 {
		return nil, core.Errorf(core.ErrInvalidArgument, "n_tensors is %d", l.N)
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
	sc.views = grow(sc.views, int(l.N)*nl)
	sc.all = grow(sc.all, len(sc.views))
	sc.groups = grow(sc.groups, int(l.N))
	views, all, groups := sc.views, sc.all, sc.groups
	// every tensor must be on the first one's device
	first := core.View{Name: "params[0]"}
	if t := at(l.Params, 0); t != nil {
		first.DeviceType, first.DeviceID = t.DeviceType, t.DeviceID
	}
	// one parameter's tensors: checked, and a failure named by list and index
	check := func(i int) error {
		vs := all[i*nl : (i+1)*nl]
		for k, li := range lists {
			v := &views[i*nl+k]
			vs[k] = v
			err := checkOne(v, li.name, at(li.ptr, i), k, vs[0])
			if err == nil {
				if err = core.SameDevice(&first, v); err != nil {
					return core.Errorf(core.StatusOf(err), "%s[%d]: %v", li.name, i, err)
				}
				continue
			}
			// built only on failure
			_, named := core.Check(li.name+"["+strconv.Itoa(i)+"]", at(li.ptr, i))
			if named == nil {
				named = core.Errorf(core.StatusOf(err), "%s[%d]: %v", li.name, i, err)
			}
			return named
		}
		if err := core.SameDType(vs[0], vs[1]); err != nil {
			return core.Errorf(core.StatusOf(err), "grads[%d] is %s but params[%d] is %s (mixed dtypes)", i, vs[1].DType, i, vs[0].DType)
		}
		groups[i] = group{p: vs[0], g: vs[1], m: vs[2], v: vs[3]}
		if nl > 4 {
			groups[i].vmax = vs[4]
		}
		return nil
	}
	// Long lists are checked by the worker pool; the error reported is the
	// one of the lowest index, as a serial check would find it.
	var mu sync.Mutex
	firstBad, firstErr := len(groups), error(nil)
	cpu.Parallel(len(groups), 512, func(lo, hi int, _ *cpu.Scratch) {
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
	if all[0].DeviceType == core.DeviceCPU && enc != nil {
		return nil, core.Errorf(core.ErrInvalidArgument, "encoder must be NULL for CPU tensors")
	}
	return groups, noOverlap(all, nl, sc)
}

// checkOne validates tensor t of list k into v: a descriptor of its own,
// contiguous, shaped like the param p, float32 for the state lists.
func checkOne(v *core.View, name string, t *core.Tensor, k int, p *core.View) error {
	var err error
	if *v, err = core.Check(name, t); err != nil {
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
// start, each must end before the next begins. vs holds nl views per
// parameter, in list order.
func noOverlap(vs []*core.View, nl int, sc *scratch) error {
	es := sc.extents[:0]
	for i, v := range vs {
		if v.N > 0 {
			lo, hi := v.Extent()
			es = append(es, extent{lo, hi, i})
		}
	}
	sc.extents = es
	sc.spare = grow(sc.spare, len(es))
	sortByStart(es, sc.spare)
	name := func(at int) string { return vs[at].Name + "[" + strconv.Itoa(at/nl) + "]" }
	for i := 1; i < len(es); i++ {
		if es[i].lo < es[i-1].hi {
			return core.Errorf(core.ErrInvalidArgument, "%s overlaps %s", name(es[i].at), name(es[i-1].at))
		}
	}
	return nil
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

// Step takes one AdamW step on every tensor of the lists.
func Step(c *Config, l Lists, enc unsafe.Pointer) error {
	sc := scratchPool.Get().(*scratch)
	defer scratchPool.Put(sc)
	groups, err := validate(c, l, enc, sc)
	if err != nil || len(groups) == 0 {
		return err
	}
	h := scalars(c)
	if groups[0].p.DeviceType == core.DeviceCUDA {
		return stepCUDA(&h, groups, enc)
	}
	stepCPU(&h, groups)
	return nil
}

// stepCPU splits the concatenation of all tensors into equal element ranges
// (thousands of small tensors cost what one large one does) and steps each
// range chunk by chunk.
func stepCPU(h *simd.AdamW, groups []group) {
	starts := make([]int, len(groups)+1) // element offset of each tensor in the concatenation
	for i, g := range groups {
		starts[i+1] = starts[i] + g.p.N
	}
	total := starts[len(groups)]
	cpu.Parallel(total, 1<<15, func(lo, hi int, s *cpu.Scratch) {
		k := cpu.K()
		t := sort.SearchInts(starts, lo+1) - 1
		for pos := lo; pos < hi; t++ {
			g := groups[t]
			off, end := pos-starts[t], min(hi, starts[t+1])-starts[t]
			for ; off < end; off += cpu.Chunk {
				n := min(cpu.Chunk, end-off)
				p := cpu.Span{P: g.p.Base, DT: g.p.DType}
				ps := p.Load(off, s.Buf(0, n))
				gs := cpu.Span{P: g.g.Base, DT: g.g.DType}.Load(off, s.Buf(1, n))
				var vmax []float32
				if g.vmax != nil {
					vmax = cpu.Float32s(g.vmax.Base, g.vmax.N)[off : off+n]
				}
				k.AdamW(h, ps, gs, cpu.Float32s(g.m.Base, g.m.N)[off:off+n], cpu.Float32s(g.v.Base, g.v.N)[off:off+n], vmax)
				p.Store(off, ps)
			}
			pos = starts[t+1]
		}
	})
}
