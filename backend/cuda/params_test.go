//go:build linux && cgo

package cuda

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

// A launch's arguments must match the kernel's parameters as the driver
// reports them: their count, 8-byte slots or one struct of all the words;
// more than the launch can pass is refused even where the driver cannot say.
func TestLaunchChecksParameters(t *testing.T) {
	slots := function{params: 3, paramLargest: 8}
	require.NoError(t, slots.takes("k", []uint64{1, 2, 3}, 3))
	require.ErrorContains(t, slots.takes("k", []uint64{1, 2}, 2), "kernel k takes 3 parameters")
	require.Error(t, function{params: 2, paramLargest: 16}.takes("k", []uint64{1, 2}, 2), "a 16-byte parameter in an 8-byte slot")
	batch := function{params: 1, paramLargest: 8 * 100}
	require.NoError(t, batch.takes("adamw", make([]uint64, 100), 1))
	require.ErrorContains(t, batch.takes("adamw", make([]uint64, 99), 1), "launch passes 1 of 792 bytes")
	unknown := function{params: -1, paramLargest: -1}
	require.NoError(t, unknown.takes("k", make([]uint64, maxParams), maxParams))
	require.ErrorContains(t, unknown.takes("k", make([]uint64, maxParams+1), maxParams+1), "at most 32")
}

// I32 never truncates.
func TestI32(t *testing.T) {
	require.Equal(t, uint64(0xffffffff), I32(-1))
	require.Panics(t, func() { I32(math.MaxInt32 + 1) })
}
