package adamw

import (
	"testing"

	"metalcore/backend/cuda"
	"metalcore/internal/core"
	tu "metalcore/tests/testutil"
)

// BenchmarkValidate5000 is the host cost of checking a 5,000-tensor list.
func BenchmarkValidate5000(b *testing.B) {
	sizes := make([]int64, 5000)
	for i := range sizes {
		sizes[i] = 16
	}
	s := newSet(b, tu.CPU, core.F32, sizes, false)
	cfg := Config{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, Step: 1}
	sc := new(scratch)
	for b.Loop() {
		if _, err := validate(&cfg, s.lists(), nil, sc); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStep5000CUDA is the host cost of a whole 5,000-tensor step on
// CUDA tensors: validation plus the launches; it needs a GPU.
func BenchmarkStep5000CUDA(b *testing.B) {
	if n, err := cuda.Devices(); err != nil || n == 0 {
		b.Skipf("no CUDA device: %v", err)
	}
	sizes := make([]int64, 5000)
	for i := range sizes {
		sizes[i] = 16
	}
	s := newSet(b, tu.CUDA, core.BF16, sizes, false)
	cfg := Config{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, Step: 1}
	for b.Loop() {
		if err := Step(&cfg, s.lists(), nil); err != nil {
			b.Fatal(err)
		}
		// drained after every step (untimed): the steps' kernel
		// parameters alone would fill the launch queue
		b.StopTimer()
		if err := cuda.Sync(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}
