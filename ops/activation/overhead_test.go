package activation

import (
	"testing"

	"metalcore/backend/cuda"
	"metalcore/internal/core"
	tu "metalcore/tests/testutil"
)

// BenchmarkCallCUDA is the host cost of one launch on a tiny tensor (the
// legacy default stream); it needs a GPU.
func BenchmarkCallCUDA(b *testing.B) {
	if n, err := cuda.Devices(); err != nil || n == 0 {
		b.Skipf("no CUDA device: %v", err)
	}
	x, y := tu.CUDA.New(core.F32, []int64{4, 64}), tu.CUDA.New(core.F32, []int64{4, 64})
	if err := SiluFwd(x.Ptr(), y.Ptr(), nil); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		_ = SiluFwd(x.Ptr(), y.Ptr(), nil)
		tu.SyncEvery(b, i)
	}
}

// BenchmarkCallCPU is the host cost of one call on a tiny CPU tensor.
func BenchmarkCallCPU(b *testing.B) {
	x, y := tu.CPU.New(core.F32, []int64{4, 64}), tu.CPU.New(core.F32, []int64{4, 64})
	b.ReportAllocs()
	for b.Loop() {
		if err := SiluFwd(x.Ptr(), y.Ptr(), nil); err != nil {
			b.Fatal(err)
		}
	}
}
