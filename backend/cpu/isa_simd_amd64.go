//go:build goexperiment.simd && amd64

package cpu

import (
	"golang.org/x/sys/cpu"

	"metalcore/backend/cpu/simd"
	"metalcore/backend/cpu/simd/avx2"
	"metalcore/backend/cpu/simd/avx512"
	"metalcore/backend/cpu/simd/f16c"
)

func isaTables() []*simd.Table {
	var ts []*simd.Table
	x := cpu.X86
	if x.HasAVX512F && x.HasAVX512BW && x.HasAVX512DQ && x.HasAVX512VL && x.HasAVX512CD {
		ts = append(ts, withF16C(avx512.Table, true))
	}
	if x.HasAVX2 && x.HasFMA {
		ts = append(ts, withF16C(avx2.Table, false))
	}
	return ts
}

// withF16C swaps in the hardware float16 conversions, which beat the
// integer emulation of the template several times over; wide: their
// 16-lane AVX-512 forms.
func withF16C(t simd.Table, wide bool) *simd.Table {
	switch {
	case !cpu.X86.HasF16C:
	case wide:
		t.F16ToF32, t.F32ToF16 = f16c.F16ToF32Wide, f16c.F32ToF16Wide
	default:
		t.F16ToF32, t.F32ToF16 = f16c.F16ToF32, f16c.F32ToF16
	}
	return &t
}
