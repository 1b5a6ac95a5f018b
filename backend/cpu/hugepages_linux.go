package cpu

import (
	"os"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"metalcore/internal/core"
)

// A kernel's first writes to a fresh output fault its pages in. The host's
// allocator maps a large tensor anew each time (glibc above its mmap
// threshold), and where transparent huge pages are given only to memory
// that asks for them (the "madvise" setting, the kernel's default), the
// faults come 4 KiB at a time: filling 40 MB that way costs several times
// what the same bytes cost in 2 MiB pages. So an output of at least
// hugeOutput bytes is advised huge pages (MADV_HUGEPAGE) over the whole 2
// MiB pages inside it before the kernel writes: advice only, which changes
// no data and no byte outside the output, and which PyTorch's own CPU
// allocator gives its large blocks when THP_MEM_ALLOC_ENABLE=1.
// MC_CPU_HUGEPAGES=0 turns it off.
const (
	hugePage   = 2 << 20
	hugeOutput = 2 * hugePage
)

func init() {
	if hugePagesAsked(os.Getenv("MC_CPU_HUGEPAGES"), "/sys/kernel/mm/transparent_hugepage/enabled") {
		core.RegisterCPUOutputReady(adviseHugePages)
	}
}

// hugePagesAsked reports whether outputs are to be advised: unless setting
// is "0", where the kernel's setting (read from path) is "madvise" (with
// "always" large memory has huge pages already; with "never" it never
// does), or cannot be read: a root without /sys (a chroot) runs on a kernel
// that still honours the advice, and one without THP refuses it harmlessly.
func hugePagesAsked(setting, path string) bool {
	if setting == "0" {
		return false
	}
	mode, err := os.ReadFile(path)
	return err != nil || strings.Contains(string(mode), "[madvise]")
}

// adviseHugePages advises huge pages for the whole 2 MiB pages of v's
// extent, if it spans hugeOutput bytes or more and the first of them is not
// in memory yet: memory already in use (an in-place output, a block the
// allocator hands out again) would gain only the kernel's background work
// of collapsing it. Errors are ignored: the advice is only that. (Raw
// calls: the memory is the host's, not a Go slice.)
func adviseHugePages(v *core.View) {
	lo, hi := v.Extent()
	if hi-lo < hugeOutput {
		return
	}
	start, end := (lo+hugePage-1)&^(hugePage-1), hi&^(hugePage-1)
	if end <= start {
		return
	}
	var resident [1]byte
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, start, 1, uintptr(unsafe.Pointer(&resident[0]))); e != 0 || resident[0]&1 != 0 {
		return
	}
	_, _, _ = unix.Syscall(unix.SYS_MADVISE, start, end-start, unix.MADV_HUGEPAGE)
}
