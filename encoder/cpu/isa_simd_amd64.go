//go:build goexperiment.simd && amd64

package cpu

import (
	"golang.org/x/sys/cpu"

	"metalcore/encoder/cpu/simd"
	"metalcore/encoder/cpu/simd/avx2"
	"metalcore/encoder/cpu/simd/avx512"
)

func isaTables() []*simd.Table {
	var ts []*simd.Table
	x := cpu.X86
	if x.HasAVX512F && x.HasAVX512BW && x.HasAVX512DQ && x.HasAVX512VL && x.HasAVX512CD {
		ts = append(ts, &avx512.Table)
	}
	if x.HasAVX2 && x.HasFMA {
		ts = append(ts, &avx2.Table)
	}
	return ts
}
