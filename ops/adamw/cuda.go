package adamw

import (
	_ "embed"
	"math"
	"unsafe"

	"metalcore/backend/cpu/simd"
	"metalcore/backend/cuda"
	"metalcore/internal/core"
)

//go:embed adamw.cu
var kernels string

func init() {
	cuda.Register(kernels)
	step.Register(core.DeviceCUDA, stepCUDA)
}

// The batch layout of adamw.cu: five pointer arrays, sizes, block prefix,
// count, the grad scale and found-inf pointers, eight float32 scalars in
// four 8-byte words, then the capturable step's steps and lr pointers and
// four float32 values in two words.
const (
	batchMax    = 512
	chunkElems  = 4096
	scalarWords = 4
	countWord   = 7*batchMax + 1
	scaleWord   = countWord + 1
	foundWord   = countWord + 2
	firstScalar = countWord + 3
	stepsWord   = firstScalar + scalarWords
	lrWord      = stepsWord + 1
	dynWord     = lrWord + 1
	batchWords  = dynWord + 2
)

// twoFloats is an 8-byte word holding a and b.
func twoFloats(a, b float32) uint64 {
	return uint64(math.Float32bits(a)) | uint64(math.Float32bits(b))<<32
}

// stepCUDA launches adamw_step once per batch of up to batchMax tensors, on
// the caller's stream; the tensor list travels in the kernel parameter.
func stepCUDA(h *simd.AdamW, groups []group, dev int, scale, inf *core.View, dyn *dynamic, enc unsafe.Pointer) error {
	var words [batchWords]uint64
	for start := 0; start < len(groups); start += batchMax {
		batch := groups[start:min(start+batchMax, len(groups))]
		clear(words[:])
		blocks := int64(0)
		for i, g := range batch {
			words[i] = cuda.Ptr(g.g)
			words[batchMax+i] = cuda.Ptr(g.p)
			words[2*batchMax+i] = cuda.Ptr(g.m)
			words[3*batchMax+i] = cuda.Ptr(g.v)
			words[4*batchMax+i] = cuda.Ptr(g.vmax)
			words[5*batchMax+i] = uint64(g.n)
			words[6*batchMax+i] = uint64(blocks)
			blocks += int64((g.n + chunkElems - 1) / chunkElems)
		}
		words[6*batchMax+len(batch)] = uint64(blocks)
		words[countWord] = uint64(len(batch))
		words[scaleWord], words[foundWord] = cuda.View(scale), cuda.View(inf)
		scalars := [2 * scalarWords]float32{h.Sign, h.Decay, h.OneMinusBeta1, h.Beta2, h.OneMinusBeta2, h.StepSize, h.BC2Sqrt, h.Eps}
		for i := range scalarWords {
			words[firstScalar+i] = twoFloats(scalars[2*i], scalars[2*i+1])
		}
		if dyn != nil { // this batch's steps start at its first tensor's
			words[stepsWord] = cuda.Ptr(unsafe.Add(dyn.steps.Base, 4*start))
			words[lrWord] = cuda.View(dyn.lr)
			words[dynWord], words[dynWord+1] = twoFloats(dyn.lrValue, dyn.decay), twoFloats(dyn.beta1, dyn.beta2)
		}
		if err := cuda.LaunchStruct(dev, enc, cuda.Kernel("adamw_step", batch[0].dt), int(blocks), 256, words[:]); err != nil {
			return cuda.Backend(err)
		}
	}
	return nil
}
