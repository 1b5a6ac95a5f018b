package dialect

import (
	"math"

	"metalcore/internal/core"
)

// What the op families share when they launch a kernel of these sources on
// any GPU backend: kernel names per dtype, row block sizes, the layouts and
// sizes the kernels take.

var dtypeSuffix = map[core.DType]string{core.F32: "_f32", core.F16: "_f16", core.BF16: "_bf16"}

// Kernel is the name of kernel family name instantiated for dt.
func Kernel(name string, dt core.DType) string { return name + dtypeSuffix[dt] }

// Flag is b as the kernels' int parameters take a bool: 1 or 0.
func Flag(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Blocks is a launch of kernel family Kernel over Blocks blocks of Threads
// threads with Shared bytes of dynamic shared memory; Loops says the kernel
// loops over its threads, so that a Metal device may give it fewer (a
// kernel of whole warps, one matrix each, must get them all).
type Blocks struct {
	Kernel                  string
	Blocks, Threads, Shared int
	Loops                   bool
}

// RowThreads is the block size of a row kernel giving each thread about
// `pieces` 16-byte pieces of a row, in whole warps, 32 to 1024.
func RowThreads(cols int, dt core.DType, pieces int) int {
	per := pieces * 16 / dt.Size()
	t := (cols + per - 1) / per
	return min(max((t+31)/32*32, 32), 1024)
}

// Fit32 fails (MC_ERR_INVALID_ARGUMENT) unless every size fits the kernels'
// 32-bit int parameters; what names them (e.g. "x's rows and columns").
func Fit32(what string, sizes ...int) error {
	for _, n := range sizes {
		if n > math.MaxInt32 {
			return core.Errorf(core.ErrInvalidArgument, "%s: %d is more than the GPU kernels take (2^31 - 1)", what, n)
		}
	}
	return nil
}

// RowStrides are the views' row strides, or an unsupported-layout error for
// the first whose outer dimensions do not collapse into one strided index,
// or an invalid-argument one for rows or columns beyond the kernels' 32-bit
// counts.
func RowStrides(vs ...*core.View) ([]int64, error) {
	out := make([]int64, len(vs))
	for i, v := range vs {
		if err := Fit32(v.Name+"'s rows and columns", v.Rows, v.Cols); err != nil {
			return nil, err
		}
		s, ok := v.RowStride()
		if !ok {
			return nil, core.Errorf(core.ErrUnsupportedLayout, "%s: on a GPU the dimensions before the last must collapse into one strided row index (strides %v)", v.Name, v.Strides)
		}
		out[i] = s
	}
	return out, nil
}
