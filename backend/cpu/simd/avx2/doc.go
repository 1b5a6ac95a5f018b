// Package avx2 implements the simd primitives with 256-bit vectors (AVX2 and
// FMA). kernels.go is generated from the avx512 template; only width.go is
// written by hand.
package avx2
