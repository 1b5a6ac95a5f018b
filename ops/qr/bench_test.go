package qr

import (
	"fmt"
	"testing"

	"metalcore/internal/core"
	tu "metalcore/tests/testutil"
)

// BenchmarkShapes is bench/qr.md's shapes, reduced mode: GFLOP/s counts
// 2mn^2 - 2n^3/3 for r and as much for forming q.
func BenchmarkShapes(b *testing.B) {
	for _, sh := range [][3]int64{{1, 1024, 1024}, {1, 2048, 512}, {1, 4096, 1024}, {1, 8192, 256}, {200, 128, 128}, {2000, 32, 32}} {
		b.Run(fmt.Sprint(sh), func(b *testing.B) {
			a := tu.New(core.F32, sh[:])
			a.Rand(tu.RNG(b), 1)
			k := min(sh[1], sh[2])
			q, r := tu.New(core.F32, []int64{sh[0], sh[1], k}), tu.New(core.F32, []int64{sh[0], k, sh[2]})
			for b.Loop() {
				if err := QR(a.Ptr(), Reduced, q.Ptr(), r.Ptr(), nil, nil); err != nil {
					b.Fatal(err)
				}
			}
			m, n := float64(sh[1]), float64(sh[2])
			fl := 2 * (2*m*n*n - 2*n*n*n/3) * float64(sh[0])
			b.ReportMetric(fl*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}
