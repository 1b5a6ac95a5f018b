//go:build linux && cgo

package cuda

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The kernels the module is searched for come from the instantiation lines
// of the sources: per dtype, with and without launch bounds, and plain ones.
func TestKernelNames(t *testing.T) {
	src := "// MC_INSTANTIATE(commented, ...) is not a line start\n" +
		"MC_INSTANTIATE(rows_fwd, (int n), (n))\n" +
		"MC_INSTANTIATE_BOUNDS(cols128, __launch_bounds__(128, 3), (int n),\n    (n))\n" +
		"MC_ENTRY(plain_sum)(const float* x) {}\n"
	require.Equal(t, []string{"rows_fwd_f32", "rows_fwd_f16", "rows_fwd_bf16", "cols128_f32", "cols128_f16",
		"cols128_bf16", "plain_sum"}, kernelNames(src))
}
