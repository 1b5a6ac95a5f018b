//go:build amd64

package f16c

import "metalcore/encoder/cpu/simd"

// widen8 and narrow8 convert n elements, n a multiple of 8 (assembly).
//
//go:noescape
func widen8(dst *float32, src *uint16, n int)

//go:noescape
func narrow8(dst *uint16, src *float32, n int)

// F16ToF32 widens src into dst.
func F16ToF32(dst []float32, src []uint16) {
	dst = dst[:len(src)]
	n := len(src) &^ 7
	if n > 0 {
		widen8(&dst[0], &src[0], n)
	}
	simd.Portable.F16ToF32(dst[n:], src[n:])
}

// F32ToF16 rounds src to nearest even into dst.
func F32ToF16(dst []uint16, src []float32) {
	dst = dst[:len(src)]
	n := len(src) &^ 7
	if n > 0 {
		narrow8(&dst[0], &src[0], n)
	}
	simd.Portable.F32ToF16(dst[n:], src[n:])
}
