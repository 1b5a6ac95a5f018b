package adamw

import (
	"testing"

	"metalcore/internal/core"
)

// BenchmarkValidate5000 is the host cost of checking a 5,000-tensor list.
func BenchmarkValidate5000(b *testing.B) {
	s := newSet(b, core.F32, make([]int64, 5000), false)
	cfg := Config{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, Step: 1}
	for b.Loop() {
		if _, err := validate(&cfg, s.lists(), nil); err != nil {
			b.Fatal(err)
		}
	}
}
