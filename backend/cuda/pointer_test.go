//go:build linux && cgo

package cuda

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// The known allocations answer for pointers inside one on its device
// only, in any order of adding; a new one replaces those it overlaps, and
// all are forgotten once maxKnown are remembered.
func TestKnownAllocations(t *testing.T) {
	var a allocations
	require.False(t, a.holds(0x1000, 0), "nothing known")
	a.add(allocation{0x1000, 0x2000, 0})
	require.True(t, a.holds(0x1000, 0))
	require.True(t, a.holds(0x1fff, 0))
	require.False(t, a.holds(0x2000, 0), "one past the end")
	require.False(t, a.holds(0xfff, 0))
	require.False(t, a.holds(0x1800, 1), "another device")
	a.add(allocation{0x8000, 0x9000, 1})
	a.add(allocation{0x3000, 0x4000, 0}) // between the two
	a.add(allocation{0x0100, 0x0200, 0}) // before them
	for _, c := range []struct {
		p    uintptr
		dev  int
		want bool
	}{{0x1000, 0, true}, {0x3fff, 0, true}, {0x8000, 1, true}, {0x8000, 0, false}, {0x01ff, 0, true},
		{0x2500, 0, false}, {0x9000, 1, false}, {0x00ff, 0, false}} {
		require.Equal(t, c.want, a.holds(c.p, c.dev), "%#x on device %d", c.p, c.dev)
	}
	a.add(allocation{0x1800, 0x3800, 1}) // the driver maps [0x1800, 0x3800) for device 1: both overlapped are gone
	require.True(t, a.holds(0x1800, 1))
	require.False(t, a.holds(0x1000, 0), "overlapped: forgotten")
	require.False(t, a.holds(0x3900, 0), "overlapped: forgotten")
	require.True(t, a.holds(0x0100, 0))
	require.True(t, a.holds(0x8fff, 1))
	require.Len(t, *a.sorted.Load(), 3)
	for i := range maxKnown {
		a.add(allocation{uintptr(0x100000 * (i + 1)), uintptr(0x100000*(i+1) + 16), 0})
	}
	require.False(t, a.holds(0x0100, 0), "forgotten once maxKnown were known")
	require.True(t, a.holds(0x100000*uintptr(maxKnown), 0))
	require.True(t, a.holds(0x100000*uintptr(maxKnown-1)+15, 0))
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
