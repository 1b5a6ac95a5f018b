package qr

import (
	"testing"

	"metalcore/internal/core"
	tu "metalcore/internal/testutil"
)

// BenchmarkSmallBatch is the batched small case of bench/qr.md.
func BenchmarkSmallBatch(b *testing.B) {
	a := tu.New(core.F32, []int64{2000, 32, 32})
	a.Rand(tu.RNG(b), 1)
	q, r := tu.New(core.F32, []int64{2000, 32, 32}), tu.New(core.F32, []int64{2000, 32, 32})
	for b.Loop() {
		if err := QR(a.Ptr(), Reduced, q.Ptr(), r.Ptr(), nil, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLarge is one 1024x1024 matrix: the blocked path, its trailing
// updates on the panel-product kernels.
func BenchmarkLarge(b *testing.B) {
	a := tu.New(core.F32, []int64{1, 1024, 1024})
	a.Rand(tu.RNG(b), 1)
	q, r := tu.New(core.F32, []int64{1, 1024, 1024}), tu.New(core.F32, []int64{1, 1024, 1024})
	for b.Loop() {
		if err := QR(a.Ptr(), Reduced, q.Ptr(), r.Ptr(), nil, nil); err != nil {
			b.Fatal(err)
		}
	}
}
