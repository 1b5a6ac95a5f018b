package ops_test

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"metalcore/internal/core"
	"metalcore/ops/norm"
	"metalcore/ops/softmax"
	tu "metalcore/tests/testutil"
)

// Many goroutines call ops at once, each on its own tensors, on rows wide
// enough that every call also fans out to the worker pool; run under -race.
func TestConcurrentCalls(t *testing.T) {
	const callers, shape0, shape1 = 8, 64, 640
	want := make([][]float64, callers)
	xs := make([]*tu.Tensor, callers)
	for g := range callers {
		xs[g] = tu.New(core.F32, []int64{shape0, shape1})
		v := xs[g].Rand(tu.RNG(t), float64(g+1))
		for _, row := range tu.Rows(v, shape1) {
			y, _ := norm.RefRMSNorm(softmax.RefSoftmax(row), nil, 1e-5)
			want[g] = append(want[g], y...)
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, callers)
	outs := make([]*tu.Tensor, callers)
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			y := tu.New(core.F32, []int64{shape0, shape1})
			for range 20 {
				if errs[g] = softmax.Fwd(xs[g].Ptr(), y.Ptr(), nil); errs[g] != nil {
					return
				}
				if errs[g] = norm.RMSNormFwd(y.Ptr(), nil, 1e-5, y.Ptr(), nil, nil); errs[g] != nil {
					return
				}
			}
			outs[g] = y
		}()
	}
	wg.Wait()
	for g := range callers {
		require.NoError(t, errs[g])
		tu.Close(t, "caller", outs[g].Values(), want[g], 1e-4)
	}
}
