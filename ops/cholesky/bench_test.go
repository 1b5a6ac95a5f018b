package cholesky

import (
	"fmt"
	"testing"

	"metalcore/internal/core"
	tu "metalcore/tests/testutil"
)

// BenchmarkShapes is bench/linalg.md's Cholesky shapes: GFLOP/s counts
// n³/3 a matrix.
func BenchmarkShapes(b *testing.B) {
	for _, sh := range [][2]int{{10000, 16}, {10000, 32}, {2000, 64}, {500, 128}} {
		b.Run(fmt.Sprint(sh), func(b *testing.B) {
			batch, n := sh[0], sh[1]
			var vals []float64
			rng := tu.RNG(b)
			for range batch {
				vals = append(vals, spd(rng, n, 1, core.F32)...)
			}
			shape := []int64{int64(batch), int64(n), int64(n)}
			a, l, info := tu.New(core.F32, shape).Set(vals), tu.New(core.F32, shape), tu.New(core.I32, shape[:1])
			for b.Loop() {
				if err := Cholesky(a.Ptr(), false, l.Ptr(), info.Ptr(), nil); err != nil {
					b.Fatal(err)
				}
			}
			fl := float64(n*n*n) / 3 * float64(batch)
			b.ReportMetric(fl*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}
