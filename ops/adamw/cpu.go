package adamw

import (
	"math"
	"sort"
	"unsafe"

	"metalcore/backend/cpu"
	"metalcore/backend/cpu/simd"
	"metalcore/internal/core"
)

func init() { step.Register(core.DeviceCPU, stepCPU) }

// Scratch buffer slots: a chunk of the parameter and of its gradient, as
// float32.
const (
	bufParam = iota
	bufGrad
)

// stepCPU reads the scaling on the host: an inf or NaN gradient somewhere
// skips the step, the scale divides the gradients. A capturable step's
// tensors are stepped in sets of one step number, each with its scalars.
func stepCPU(h *simd.AdamW, groups []group, _ int, scale, inf *core.View, dyn *dynamic, _ unsafe.Pointer) error {
	if inf != nil && *(*float32)(inf.Base) != 0 {
		return nil
	}
	if scale != nil {
		h.Sign /= *(*float32)(scale.Base)
	}
	if dyn == nil {
		stepRanges(h, groups)
		return nil
	}
	steps := cpu.Float32s(dyn.steps.Base, len(groups))
	lr := dyn.lrValue
	if dyn.lr != nil {
		lr = *(*float32)(dyn.lr.Base)
	}
	bySteps := map[float32][]group{}
	for i, g := range groups {
		bySteps[steps[i]] = append(bySteps[steps[i]], g)
	}
	for n, set := range bySteps {
		hs := stepScalars(*h, lr, n, dyn)
		stepRanges(&hs, set)
	}
	return nil
}

// stepScalars are h with the scalars that depend on the step number and
// lr formed as the CUDA kernel forms them (adamw_device_scalars): in
// float32, as PyTorch's capturable step does.
func stepScalars(h simd.AdamW, lr, step float32, dyn *dynamic) simd.AdamW {
	h.Decay = 1 - lr*dyn.decay
	h.StepSize = lr / (1 - float32(math.Pow(float64(dyn.beta1), float64(step))))
	h.BC2Sqrt = float32(math.Sqrt(float64(1 - float32(math.Pow(float64(dyn.beta2), float64(step))))))
	return h
}

// stepRanges splits the concatenation of all tensors into equal element ranges
// (thousands of small tensors cost what one large one does) and steps each
// range chunk by chunk.
func stepRanges(h *simd.AdamW, groups []group) {
	starts := make([]int, len(groups)+1) // element offset of each tensor in the concatenation
	for i, g := range groups {
		starts[i+1] = starts[i] + g.n
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
				p := cpu.Span{P: g.p, DT: g.dt}
				ps := p.Load(off, s.Buf(bufParam, n))
				gs := cpu.Span{P: g.g, DT: g.dt}.Load(off, s.Buf(bufGrad, n))
				state := func(q unsafe.Pointer) []float32 { return cpu.Float32s(q, g.n)[off : off+n] }
				var vmax []float32
				if g.vmax != nil {
					vmax = state(g.vmax)
				}
				k.AdamW(h, ps, gs, state(g.m), state(g.v), vmax)
				p.Store(off, ps)
			}
			pos = starts[t+1]
		}
	})
}
