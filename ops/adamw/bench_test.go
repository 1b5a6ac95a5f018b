package adamw

import (
	"testing"

	"metalcore/internal/core"
)

// BenchmarkValidate5000 is the host cost of checking a 5,000-tensor list.
func BenchmarkValidate5000(b *testing.B) {
	sizes := make([]int64, 5000)
	for i := range sizes {
		sizes[i] = 16
	}
	s := newSet(b, core.F32, sizes, false)
	cfg := Config{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, Step: 1}
	sc := new(scratch)
	for b.Loop() {
		if _, err := validate(&cfg, s.lists(), nil, sc); err != nil {
			b.Fatal(err)
		}
	}
}
