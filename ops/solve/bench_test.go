package solve

import (
	"fmt"
	"testing"

	"metalcore/internal/core"
	tu "metalcore/tests/testutil"
)

// BenchmarkShapes solves batches of systems with one right-hand side on
// the CPU (bench/linalg.md measures them against PyTorch).
func BenchmarkShapes(b *testing.B) {
	for _, c := range [][2]int{{10000, 32}, {10000, 16}, {2000, 64}, {500, 128}} {
		batch, n := c[0], c[1]
		b.Run(fmt.Sprintf("%dx%d", batch, n), func(b *testing.B) {
			rng := tu.RNG(b)
			av := make([]float64, 0, batch*n*n)
			for range batch {
				av = append(av, random(rng, n, 8, core.F32)...)
			}
			bv := make([]float64, batch*n)
			for i := range bv {
				bv[i] = rng.NormFloat64()
			}
			a := tu.New(core.F32, []int64{int64(batch), int64(n), int64(n)}).Set(av)
			rhs := tu.New(core.F32, []int64{int64(batch), int64(n), 1}).Set(bv)
			x, info := tu.New(core.F32, []int64{int64(batch), int64(n), 1}), tu.New(core.I32, []int64{int64(batch)})
			for b.Loop() {
				if err := Solve(a.Ptr(), rhs.Ptr(), x.Ptr(), info.Ptr(), nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
