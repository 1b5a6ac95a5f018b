package eigh

import (
	"fmt"
	"testing"

	"metalcore/internal/core"
	tu "metalcore/tests/testutil"
)

// BenchmarkShapes decomposes batches of random symmetric matrices on the
// CPU, eigenvectors included (bench/linalg.md measures them against
// PyTorch).
func BenchmarkShapes(b *testing.B) {
	for _, c := range [][2]int{{5000, 16}, {10000, 32}, {1000, 64}, {200, 128}} {
		batch, n := c[0], c[1]
		b.Run(fmt.Sprintf("%dx%d", batch, n), func(b *testing.B) {
			rng := tu.RNG(b)
			av := make([]float64, 0, batch*n*n)
			for range batch {
				av = append(av, symmetric(rng, n, core.F32, false)...)
			}
			shape := []int64{int64(batch), int64(n), int64(n)}
			a := tu.New(core.F32, shape).Set(av)
			w, v, info := tu.New(core.F32, shape[:2]), tu.New(core.F32, shape), tu.New(core.I32, shape[:1])
			for b.Loop() {
				if err := Eigh(a.Ptr(), false, w.Ptr(), v.Ptr(), info.Ptr(), nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
