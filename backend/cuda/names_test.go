//go:build linux && cgo

package cuda

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The kernels the module is searched for come from the instantiation lines
// of the sources: per dtype (with launch bounds, shared memory or neither),
// and plain ones.
func TestKernelNames(t *testing.T) {
	src := "// MC_INSTANTIATE(commented, ...) is not a line start\n" +
		"MC_INSTANTIATE(rows_fwd, (int n), (n))\n" +
		"MC_INSTANTIATE_BOUNDS(cols128, MC_BOUNDS(128, 3), (int n),\n    (n))\n" +
		"MC_INSTANTIATE_GROUP( rows_bwd , 66, , (int n), (n))\n" +
		"MC_ENTRY(plain_sum, (const float* x)) {}\n" +
		"MC_ENTRY(plain_max, MC_MAX_PARAMS) {}\n" +
		"MC_ENTRY_GROUP(plain_scan, ScanShared, (int n), (n))\n"
	require.Equal(t, []string{"rows_fwd_f32", "rows_fwd_f16", "rows_fwd_bf16", "cols128_f32", "cols128_f16",
		"cols128_bf16", "rows_bwd_f32", "rows_bwd_f16", "rows_bwd_bf16", "plain_sum", "plain_max", "plain_scan"},
		kernelNames(src))
}
