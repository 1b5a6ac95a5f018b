package cuda

import (
	"fmt"
	"math"
	"unsafe"

	"metalcore/backend/dialect"
	"metalcore/internal/core"
)

// LaunchBlocks launches l's kernel for dt on dev's stream with args
// (LaunchShared), failures as Backend's.
func LaunchBlocks(dev int, stream unsafe.Pointer, l dialect.Blocks, dt core.DType, args ...uint64) error {
	return Backend(LaunchShared(dev, stream, dialect.Kernel(l.Kernel, dt), l.Blocks, l.Threads, l.Shared, args...))
}

// Kernel parameter slots (8 bytes each; narrower values in the low bytes).
func Ptr(p unsafe.Pointer) uint64 { return uint64(uintptr(p)) }
func I64(v int64) uint64          { return uint64(v) }
func F32(v float32) uint64        { return uint64(math.Float32bits(v)) }

// I32 is a 32-bit int parameter. The ops check their sizes with Fit32
// first; a value that does not fit is a bug, not a truncation.
func I32(v int) uint64 {
	if v != int(int32(v)) {
		panic(fmt.Sprintf("cuda.I32: %d does not fit a 32-bit kernel parameter", v))
	}
	return uint64(uint32(int32(v)))
}

// RowsAhead picks a row kernel's variant and grid: for 16-bit rows
// NAME_ahead, with as many blocks as dev holds at once, each taking every
// grid-th row and fetching its next row while it works on one (measured on
// an H100: RMSNorm 4096x8192 bfloat16 83% -> 94% of copy bandwidth; float32
// rows ran up to 5% slower so); otherwise NAME with a block per row. stream
// is the one the kernel will run on (see Resident).
func RowsAhead(dev int, stream unsafe.Pointer, name string, dt core.DType, rows, threads int) (string, int, error) {
	if dt == core.F32 {
		return dialect.Kernel(name, dt), rows, nil
	}
	name = dialect.Kernel(name+"_ahead", dt)
	wave, err := Wave(dev, stream, name, threads)
	return name, min(rows, wave), err
}

// View is the data pointer of an optional view (0 when absent).
func View(v *core.View) uint64 {
	if v == nil {
		return 0
	}
	return Ptr(v.Base)
}

// Backend wraps a launch failure as MC_ERR_BACKEND (validation errors pass
// through).
func Backend(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := err.(*core.Error); ok {
		return err
	}
	return core.Errorf(core.ErrBackend, "%v", err)
}
