package norm

import (
	"testing"

	"metalcore/internal/core"
	tu "metalcore/tests/testutil"
)

// BenchmarkCallCPU is the host cost of one LayerNorm forward on a tiny CPU
// tensor, statistics included.
func BenchmarkCallCPU(b *testing.B) {
	x, y := tu.CPU.New(core.F32, []int64{4, 64}), tu.CPU.New(core.F32, []int64{4, 64})
	w, bias := tu.CPU.New(core.F32, []int64{64}), tu.CPU.New(core.F32, []int64{64})
	mean, rstd := tu.CPU.New(core.F32, []int64{4}), tu.CPU.New(core.F32, []int64{4})
	b.ReportAllocs()
	for b.Loop() {
		if err := LayerNormFwd(x.Ptr(), w.Ptr(), bias.Ptr(), 1e-5, y.Ptr(), mean.Ptr(), rstd.Ptr(), nil); err != nil {
			b.Fatal(err)
		}
	}
}
