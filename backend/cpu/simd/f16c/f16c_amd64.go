//go:build amd64

package f16c

import "metalcore/backend/cpu/simd"

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

// F16ToF32 widens src into dst.
func F16ToF32(dst []float32, src []uint16) { blocks(dst, src, 8, widen8, simd.Portable.F16ToF32) }

// F32ToF16 rounds src to nearest even into dst.
func F32ToF16(dst []uint16, src []float32) { blocks(dst, src, 8, narrow8, simd.Portable.F32ToF16) }

// F16ToF32Wide and F32ToF16Wide are F16ToF32 and F32ToF16 for CPUs with
// AVX-512 (twice the elements an instruction).
func F16ToF32Wide(dst []float32, src []uint16) { blocks(dst, src, 16, widen16, F16ToF32) }
func F32ToF16Wide(dst []uint16, src []float32) { blocks(dst, src, 16, narrow16, F32ToF16) }

// blocks converts src's whole blocks of lanes elements with the assembly
// loop and hands the rest to tail.
func blocks[D, S any](dst []D, src []S, lanes int, loop func(*D, *S, int), tail func([]D, []S)) {
	dst = dst[:len(src)]
	n := len(src) / lanes * lanes
	if n > 0 {
		loop(&dst[0], &src[0], n)
	}
	tail(dst[n:], src[n:])
}
