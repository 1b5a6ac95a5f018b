package dialect

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"metalcore/internal/core"
)

// Sizes beyond the kernels' 32-bit counts are refused with a message.
func TestThirtyTwoBitSizes(t *testing.T) {
	require.NoError(t, Fit32("x", 0, math.MaxInt32))
	err := Fit32("x's rows and columns", 1, math.MaxInt32+1)
	require.Equal(t, core.ErrInvalidArgument, core.StatusOf(err))
	require.ErrorContains(t, err, "x's rows and columns: 2147483648")
	v := core.View{Name: "x", Rows: 1, Cols: math.MaxInt32 + 64}
	_, err = RowStrides(&v)
	require.Equal(t, core.ErrInvalidArgument, core.StatusOf(err))
}

// Row blocks come in whole warps, 32 to 1024 threads, about `pieces`
// 16-byte pieces a thread.
func TestRowThreads(t *testing.T) {
	require.Equal(t, 32, RowThreads(1, core.F32, 4))
	require.Equal(t, 1024, RowThreads(4096, core.F32, 1))
	require.Equal(t, 1024, RowThreads(1<<20, core.BF16, 4))
	require.Equal(t, 64, RowThreads(33*16, core.F32, 4)) // 33 threads' worth: two warps
	require.Equal(t, "rmsnorm_fwd_bf16", Kernel("rmsnorm_fwd", core.BF16))
}
