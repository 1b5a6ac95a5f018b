//go:build linux

package ops_test

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"metalcore/internal/core"
	"metalcore/ops/activation"
)

// TestCPUOutputsAdvisedHugePages: a validated CPU call advises huge pages
// for the whole 2 MiB pages of a large output not yet in memory, before
// its kernel writes (backend/cpu's hugepages_linux.go), and leaves small
// outputs, outputs already in memory and the inputs alone; the results are
// the same.
func TestCPUOutputsAdvisedHugePages(t *testing.T) {
	// (a setting that cannot be read is advised as madvise is)
	mode, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	if err == nil && !strings.Contains(string(mode), "[madvise]") || os.Getenv("MC_CPU_HUGEPAGES") == "0" {
		t.Skipf("transparent huge pages are not in madvise mode here (%q) or MC_CPU_HUGEPAGES=0: nothing is advised", mode)
	}
	const page = 2 << 20
	probe := mapped(t, page)
	if err := unix.Madvise(probe, unix.MADV_HUGEPAGE); err != nil {
		t.Skipf("madvise(MADV_HUGEPAGE) refused here: %v", err)
	}
	if advised, _ := hugeAdvised(t, uintptr(unsafe.Pointer(&probe[0]))); !advised {
		t.Skip("this process's advice does not show in /proc/self/smaps here (an emulator's own mappings): nothing to check it by")
	}
	for _, c := range []struct {
		name              string
		elems, offset     int // y starts offset bytes past a 2 MiB boundary
		inMemory, inPlace bool
		advised           bool
	}{
		{"8 MiB, fresh", 2 << 20, 4096, false, false, true},
		{"8 MiB, in memory", 2 << 20, 4096, true, false, false},
		{"8 MiB, in place", 2 << 20, 4096, true, true, false},
		{"3 MiB, fresh: a whole 2 MiB page, below the size advised", 3 << 18, 0, false, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			// x and y each in a mapping of their own, so only whole huge
			// pages inside y can be advised
			x, y := mapped(t, c.elems*4+page), mapped(t, c.elems*4+page)
			xs := unsafe.Slice((*float32)(unsafe.Pointer(&x[4096])), c.elems)
			ys := unsafe.Slice((*float32)(unsafe.Pointer(&y[c.offset])), c.elems)
			if c.inPlace {
				ys = xs
			}
			for i := range xs {
				xs[i] = float32(i%7) - 3
			}
			// poisoned: all of y in memory, else only what precedes its
			// first whole 2 MiB page (the rest stays as the mapping made it)
			poisoned := ys[:(page-c.offset)%page/4]
			if c.inMemory && !c.inPlace {
				poisoned = ys
			}
			for i := range poisoned {
				poisoned[i] = float32(math.NaN())
			}
			shape := []int64{int64(c.elems)}
			xt := core.Tensor{Data: unsafe.Pointer(&xs[0]), DeviceType: core.DeviceCPU, NDim: 1, Code: 2, Bits: 32, Lanes: 1, Shape: &shape[0]}
			yt := xt
			yt.Data = unsafe.Pointer(&ys[0])
			if err := activation.SiluFwd(&xt, &yt, nil); err != nil {
				t.Fatal(err)
			}
			var want [7]float64 // x takes seven values
			for k := range want {
				v := float64(k - 3)
				want[k] = v / (1 + math.Exp(-v))
			}
			for i, got := range ys {
				if w := want[i%7]; math.Abs(float64(got)-w) > 1e-6*(1+math.Abs(w)) {
					t.Fatalf("y[%d] = %v, want %v", i, got, w)
				}
			}
			inner := (uintptr(unsafe.Pointer(&ys[0])) + page - 1) &^ (page - 1)
			if got, found := hugeAdvised(t, inner); !found || got != c.advised {
				t.Errorf("the output's first whole 2 MiB page advised %v (its mapping found: %v), want %v", got, found, c.advised)
			}
			if advised, _ := hugeAdvised(t, uintptr(unsafe.Pointer(&xs[0]))); !c.inPlace && advised {
				t.Error("the input was advised")
			}
		})
	}
}

// mapped is n bytes of fresh anonymous memory starting at a 2 MiB
// boundary, unmapped when the test ends.
func mapped(t *testing.T, n int) []byte {
	const page = 2 << 20
	b, err := unix.Mmap(-1, 0, n+page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Munmap(b) })
	off := int((page - uintptr(unsafe.Pointer(&b[0]))%page) % page)
	return b[off : off+n]
}

// hugeAdvised reports whether the mapping holding address p carries
// MADV_HUGEPAGE (VmFlags "hg" in /proc/self/smaps), and whether one holds it.
func hugeAdvised(t *testing.T, p uintptr) (advised, found bool) {
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	in := false
	s := bufio.NewScanner(f)
	for s.Scan() {
		line := s.Text()
		var lo, hi uintptr
		if n, _ := fmt.Sscanf(line, "%x-%x ", &lo, &hi); n == 2 {
			in = p >= lo && p < hi
			continue
		}
		if in && strings.HasPrefix(line, "VmFlags:") {
			return strings.Contains(line, " hg"), true
		}
	}
	return false, false
}
