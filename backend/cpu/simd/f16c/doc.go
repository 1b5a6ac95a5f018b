// Package f16c converts between float16 and float32 with the F16C
// instructions (VCVTPH2PS, VCVTPS2PH rounding to nearest even), which Go's
// simd/archsimd package does not expose. amd64 only; backend/cpu uses it
// where the CPU reports F16C.
package f16c
