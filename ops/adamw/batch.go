package adamw

import (
	"math"
	"unsafe"

	"metalcore/backend/cpu/simd"
	"metalcore/internal/core"
)

// batchLayout is adamw.cu's AdamWBatch for ADAMW_MAX = max, in 8-byte
// words: five address arrays, sizes, block prefix, count, the grad scale
// and found-inf addresses, eight float32 scalars in four words, then the
// capturable step's steps and lr addresses and four float32 values in two
// words.
type batchLayout struct {
	max, count, scale, found, firstScalar, steps, lr, dyn, words int
}

// The GPU kernels' chunk of a tensor a block (ADAMW_CHUNK), and the
// batch's float32 scalars in words.
const (
	chunkElems  = 4096
	scalarWords = 4
	// batchTail is the words after the per-tensor arrays: first_block's
	// last, count, two addresses, the scalars, two addresses, two values
	batchTail = 1 + 1 + 2 + scalarWords + 2 + 2
)

func layoutFor(max int) batchLayout {
	l := batchLayout{max: max, count: 7*max + 1}
	l.scale, l.found, l.firstScalar = l.count+1, l.count+2, l.count+3
	l.steps = l.firstScalar + scalarWords
	l.lr, l.dyn = l.steps+1, l.steps+2
	l.words = 7*max + batchTail // = l.dyn + 2
	return l
}

// twoFloats is an 8-byte word holding a and b.
func twoFloats(a, b float32) uint64 {
	return uint64(math.Float32bits(a)) | uint64(math.Float32bits(b))<<32
}

// fill writes the batch of the groups starting at group `start` into words
// (len l.words) and returns its block count. addr is a tensor's address as
// the kernel reads it: group g's k-th pointer in the batch's order (see
// ptr), or a view's at a byte offset (nil: 0).
func (l batchLayout) fill(words []uint64, batch []group, start int, h *simd.AdamW, scale, inf *core.View, dyn *dynamic,
	tensor func(g *group, k int) uint64, view func(v *core.View, at uint64) uint64) int {
	clear(words)
	blocks := int64(0)
	for i := range batch {
		g := &batch[i]
		for k := range 5 {
			words[k*l.max+i] = tensor(g, k)
		}
		words[5*l.max+i] = uint64(g.n)
		words[6*l.max+i] = uint64(blocks)
		blocks += int64((g.n + chunkElems - 1) / chunkElems)
	}
	words[6*l.max+len(batch)] = uint64(blocks)
	words[l.count] = uint64(len(batch))
	words[l.scale], words[l.found] = view(scale, 0), view(inf, 0)
	scalars := [2 * scalarWords]float32{h.Sign, h.Decay, h.OneMinusBeta1, h.Beta2, h.OneMinusBeta2, h.StepSize, h.BC2Sqrt, h.Eps}
	for i := range scalarWords {
		words[l.firstScalar+i] = twoFloats(scalars[2*i], scalars[2*i+1])
	}
	if dyn != nil { // this batch's steps start at its first tensor's
		words[l.steps] = view(dyn.steps, uint64(4*start))
		words[l.lr] = view(dyn.lr, 0)
		words[l.dyn], words[l.dyn+1] = twoFloats(dyn.lrValue, dyn.decay), twoFloats(dyn.beta1, dyn.beta2)
	}
	return int(blocks)
}

// ptr is group g's k-th pointer in the batch's order: 0 grad, 1 param,
// 2 m, 3 v, 4 vmax.
func (g *group) ptr(k int) unsafe.Pointer {
	return [5]unsafe.Pointer{g.g, g.p, g.m, g.v, g.vmax}[k]
}
