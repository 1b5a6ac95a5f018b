package adamw

import (
	"unsafe"

	"metalcore/encoder/cpu/simd"
	"metalcore/internal/core"
)

// stepCUDA: the CUDA kernel is not written yet; the call is refused before
// anything is written, like any unsupported device.
func stepCUDA(*simd.AdamW, []group, unsafe.Pointer) error {
	return core.Errorf(core.ErrUnsupportedDevice, "AdamW on CUDA tensors is not implemented yet (CPU only)")
}
