package loss

import (
	"unsafe"

	"metalcore/backend/dialect"
	"metalcore/internal/core"
)

// What the CUDA and Metal launches share: the kernel's arguments for the
// optional tensors, and how much of a row its block keeps on chip.

// ceScratch is loss.cu's CE_SCRATCH (floats); registerPieces the dialect's
// MC_CACHE, the pieces of a row a thread keeps in registers.
const (
	ceScratch      = 68
	registerPieces = 4
)

// spillPieces is how many 16-byte pieces of a row each of threads keeps in
// shared memory past its registers, within most bytes, for the gradient's
// pass: the rest of the row, or what fits; none where the row is read once
// (no gradient, or the gradient from a saved log-sum-exp).
func spillPieces(x *core.View, a args, hasGrad bool, threads, most int) int {
	if !hasGrad || a.stats == readStats {
		return 0
	}
	per := 16 / x.DType.Size() * threads
	return max(0, min((x.Cols+per-1)/per-registerPieces, (most-ceScratch*4)/(threads*16)))
}

// sharedBytes is the kernel's shared memory for spill pieces a thread.
func sharedBytes(spill, threads int) int { return ceScratch*4 + spill*threads*16 }

// kernelArgs are what the kernel takes for the optional tensors: their data
// (the logits' where one is absent, never read: a GPU binding is never left
// empty), the row strides of logits and gradient, and the has_scale and
// has_grad flags.
type kernelArgs struct {
	scale, loss, grad, lse unsafe.Pointer
	strides                [2]int64
	hasScale, hasGrad      int
}

// gpuArgs are the kernel's arguments for the optional tensors.
func gpuArgs(x, scale, loss, g, lse *core.View) (k kernelArgs, err error) {
	data := func(v *core.View) unsafe.Pointer {
		if v == nil {
			return x.Base
		}
		return v.Base
	}
	k = kernelArgs{scale: data(scale), loss: data(loss), grad: data(g), lse: data(lse)}
	rowsOf := []*core.View{x}
	if scale != nil { // has_scale: 1, one for every row; 2, one per row
		k.hasScale = 1
		if scale.N > 1 {
			k.hasScale = 2
		}
	}
	if g != nil {
		k.hasGrad = 1
		rowsOf = append(rowsOf, g)
	}
	st, err := dialect.RowStrides(rowsOf...)
	if err != nil {
		return k, err
	}
	copy(k.strides[:], st)
	return k, nil
}
