package svd

import (
	"fmt"
	"testing"

	"metalcore/internal/core"
	tu "metalcore/tests/testutil"
)

// BenchmarkShapes decomposes batches of random matrices on the CPU, vectors
// included (bench/linalg.md measures them against PyTorch).
func BenchmarkShapes(b *testing.B) {
	for _, c := range [][3]int{{2000, 32, 32}, {1000, 64, 16}, {1000, 64, 64}, {100, 128, 128}} {
		batch, m, n := c[0], c[1], c[2]
		b.Run(fmt.Sprintf("%dx%dx%d", batch, m, n), func(b *testing.B) {
			rng := tu.RNG(b)
			lead := []int64{int64(batch)}
			a := tu.New(core.F32, []int64{int64(batch), int64(m), int64(n)}).Set(random(rng, batch*m, n, core.F32))
			s, u, vh, info := outputs(tu.Backend{DeviceType: core.DeviceCPU}, core.F32, lead, m, n, true)
			for b.Loop() {
				if err := SVD(a.Ptr(), u.Ptr(), s.Ptr(), vh.Ptr(), info.Ptr(), nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
