//go:build amd64

package f16c

import "metalcore/encoder/cpu/simd"

// widen8 and narrow8 convert n elements, n a multiple of 8 (assembly).
//
//go:noescape
func widen8(dst *float32, src *uint16, n int)

//go:noescape
func narrow8(dst *uint16, src *float32, n int)

// widen16 and narrow16 are widen8 and narrow8 on 16 elements at a time
// (AVX-512), n a multiple of 16.
//
//go:noescape
func widen16(dst *float32, src *uint16, n int)

//go:noescape
func narrow16(dst *uint16, src *float32, n int)

// F16ToF32Wide and F32ToF16Wide are F16ToF32 and F32ToF16 for CPUs with
// AVX-512 (twice the elements an instruction).
func F16ToF32Wide(dst []float32, src []uint16) {
	dst = dst[:len(src)]
	n := len(src) &^ 15
	if n > 0 {
		widen16(&dst[0], &src[0], n)
	}
	F16ToF32(dst[n:], src[n:])
}

func F32ToF16Wide(dst []uint16, src []float32) {
	dst = dst[:len(src)]
	n := len(src) &^ 15
	if n > 0 {
		narrow16(&dst[0], &src[0], n)
	}
	F32ToF16(dst[n:], src[n:])
}

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
