//go:build linux && cgo

package cuda_test

import (
	"testing"

	"metalcore/backend/cuda"
	tu "metalcore/tests/testutil"
)

// The host cost of a call, piece by piece; they need a GPU and skip without.

func init() { cuda.Register("MC_ENTRY(mc_bench_empty, (int n)) {}\n") }

func needGPU(b *testing.B) {
	if n, err := cuda.Devices(); err != nil || n == 0 {
		b.Skipf("no CUDA device: %v", err)
	}
	if err := cuda.Prepare(0); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkLaunch is one launch of an empty kernel: the driver's
// cuLaunchKernel plus the cgo call and the kernel lookup.
func BenchmarkLaunch(b *testing.B) {
	needGPU(b)
	for i := 0; b.Loop(); i++ {
		if err := cuda.Launch(0, nil, "mc_bench_empty", 1, 32, cuda.I32(0)); err != nil {
			b.Fatal(err)
		}
		tu.SyncEvery(b, i)
	}
}

// BenchmarkCheckPointer is one tensor's device check.
func BenchmarkCheckPointer(b *testing.B) {
	needGPU(b)
	buf, err := cuda.Alloc(0, 1024)
	if err != nil {
		b.Fatal(err)
	}
	defer buf.Free()
	for b.Loop() {
		if err := cuda.CheckPointer(buf.Ptr, 0); err != nil {
			b.Fatal(err)
		}
	}
}
