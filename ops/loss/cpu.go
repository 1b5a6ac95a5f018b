package loss

import (
	"math"
	"unsafe"

	"metalcore/backend/cpu"
	"metalcore/backend/cpu/simd"
	"metalcore/internal/core"
)

func init() {
	crossEntropy.Register(core.DeviceCPU, crossEntropyCPU)
	gradScale.Register(core.DeviceCPU, gradScaleCPU)
}

// Scratch buffer slots: the row as float32, and its exponentials.
const (
	bufX = iota
	bufE
)

func crossEntropyCPU(xv, tv, sv, lv, gv, sev *core.View, a args, _ unsafe.Pointer) error {
	cols, targets := xv.Cols, unsafe.Slice((*int64)(tv.Base), tv.N)
	for r, t := range targets { // before anything is written
		if t != a.ignore && (t < 0 || t >= int64(cols)) {
			return core.Errorf(core.ErrInvalidArgument, "target %d of row %d is outside [0, %d) and not ignore_index (%d)",
				t, r, cols, a.ignore)
		}
	}
	scales := []float32{1}
	if sv != nil {
		scales = cpu.Float32s(sv.Base, sv.N)
	}
	var losses, lses []float32
	if lv != nil {
		losses = cpu.Float32s(lv.Base, lv.N)
	}
	if sev != nil {
		lses = cpu.Float32s(sev.Base, sev.N)
	}
	s, v := a.smoothing, float32(cols)
	cpu.Parallel(xv.Rows, cpu.RowGrain(cols), func(lo, hi int, sc *cpu.Scratch) {
		k := cpu.K()
		for r := lo; r < hi; r++ {
			t := targets[r]
			var g cpu.Span
			e := sc.Buf(bufE, cols)
			if gv != nil {
				g = cpu.RowSpan(gv, r)
				e = g.Out(0, e) // float32: the gradient's own memory (x's, in place)
			}
			if t == a.ignore {
				if losses != nil {
					losses[r] = 0
				}
				if a.stats == writeStats {
					lses[r] = 0
				}
				if gv != nil {
					clear(e)
					g.Store(0, e)
				}
				continue
			}
			xs := cpu.RowSpan(xv, r).Load(0, sc.Buf(bufX, cols))
			// the gradient comes from e = exp(x - c), whose sum is sum
			c, sum := float32(0), float32(1)
			if a.stats == readStats {
				c = lses[r]        // the forward's log-sum-exp: sum 1
				if cpu.Finite(c) { // (the vector exp's clamp would turn a NaN into 0)
					k.ExpSum(e, xs, c)
				}
			} else {
				xt, mean := xs[t], float32(0)
				if s != 0 {
					total, _ := k.ShiftedSums(xs, 0)
					mean = total / v
				}
				c = k.Max(xs)
				lse := float32(math.NaN()) // NaN, +inf or a row of -inf: NaN, as in float64
				if cpu.Finite(c) {
					sum = k.ExpSum(e, xs, c) // x is read first where e is x
					lse = c + float32(math.Log(float64(sum)))
				}
				losses[r] = (1-s)*(lse-xt) + s*(lse-mean)
				if a.stats == writeStats {
					lses[r] = lse
				}
			}
			if gv == nil {
				continue
			}
			if cpu.Finite(c) {
				gradient(k, e, int(t), scales[min(r, len(scales)-1)], sum, s/v, 1-s)
			} else {
				cpu.Fill(e, float32(math.NaN()))
			}
			g.Store(0, e)
		}
	})
	return nil
}

// gradient turns e = exp(x - c), whose sum over the row is sum, into
// scale · (e/sum − spread − hit·[j = t]).
func gradient(k *simd.Table, e []float32, t int, scale, sum, spread, hit float32) {
	k.Normalize(e, e, nil, nil, sum*spread, scale/sum)
	e[t] -= scale * hit
}

func gradScaleCPU(gv, sv *core.View, _ unsafe.Pointer) error {
	s := cpu.Float32s(sv.Base, 1)[0]
	if s == 1 {
		return nil
	}
	g := *gv // a copy for the workers: the caller's view stays on its stack
	chunks := (g.N + cpu.Chunk - 1) / cpu.Chunk
	cpu.Parallel(chunks, cpu.RowGrain(cpu.Chunk), func(lo, hi int, sc *cpu.Scratch) {
		k := cpu.K()
		for i := lo; i < hi; i++ {
			span, m := cpu.TensorSpan(&g).At(i*cpu.Chunk), min(cpu.Chunk, g.N-i*cpu.Chunk)
			e := span.Out(0, sc.Buf(bufE, m))
			k.Normalize(e, span.Load(0, e), nil, nil, 0, s)
			span.Store(0, e)
		}
	})
	return nil
}
