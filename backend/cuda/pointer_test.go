//go:build linux && cgo

package cuda

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// The ring of known allocations answers for pointers inside one on its
// device only, and forgets the oldest when full.
func TestKnownAllocations(t *testing.T) {
	var a allocations
	a.add(allocation{0x1000, 0x2000, 0})
	require.True(t, a.holds(0x1000, 0))
	require.True(t, a.holds(0x1fff, 0))
	require.False(t, a.holds(0x2000, 0), "one past the end")
	require.False(t, a.holds(0xfff, 0))
	require.False(t, a.holds(0x1800, 1), "another device")
	for i := range len(a.ring) {
		a.add(allocation{uintptr(0x10000 * (i + 1)), uintptr(0x10000*(i+1) + 16), 0})
	}
	require.False(t, a.holds(0x1000, 0), "forgotten once the ring went round")
	require.True(t, a.holds(0x10000*uintptr(len(a.ring)), 0))
}

// CheckPointer takes device memory (anywhere in an allocation, checked
// again after it was remembered) and refuses host memory and a wrong
// device, remembered or not.
func TestCheckPointer(t *testing.T) {
	t.Run("cuda", func(t *testing.T) {
		if n, err := Devices(); err != nil || n == 0 {
			t.Skipf("no CUDA device: %v", err)
		}
		buf, err := Alloc(0, 4096)
		require.NoError(t, err)
		defer buf.Free()
		for range 2 { // the second time from the ring
			require.NoError(t, CheckPointer(buf.Ptr, 0))
			require.NoError(t, CheckPointer(unsafe.Add(buf.Ptr, 4000), 0))
			require.ErrorContains(t, CheckPointer(buf.Ptr, 1), "is memory of CUDA device 0, not 1")
		}
		host := make([]float32, 1024)
		require.ErrorContains(t, CheckPointer(unsafe.Pointer(&host[0]), 0), "is not CUDA device memory")
	})
}
