// Command capi is the C ABI of metalcore, built with -buildmode=c-shared.
// The header's functions are defined in C (gate.c: the version, the error
// buffer, and the refusal in a forked child); each op's mcgo_ export here
// only translates: it reinterprets the host's mc_tensor pointers, calls
// the op family, turns a failure into an mc_status plus a thread-local
// message, and keeps Go panics from crossing into the host.
package main

/*
#cgo CFLAGS: -I${SRCDIR}/../include -DMETALCORE_TYPES_ONLY
#include <stddef.h>
#include "metalcore.h"
void mc_set_error(const char* msg, size_t n);
*/
import "C"

import (
	"fmt"
	"runtime/debug"
	"sync"
	"unsafe"

	"metalcore/backend/cpu"
	"metalcore/backend/cuda"
	"metalcore/backend/metal"
	"metalcore/internal/core"
)

func main() {}

// the CUDA backend's cache keys carry the library's version
func init() {
	cuda.LibraryVersion = fmt.Sprintf("%d.%d.%d", C.MC_VERSION_MAJOR, C.MC_VERSION_MINOR, C.MC_VERSION_PATCH)
}

// tensor reinterprets a host descriptor; core.Tensor has mc_tensor's layout
// (checked by a test).
func tensor(t *C.mc_tensor) *core.Tensor { return (*core.Tensor)(unsafe.Pointer(t)) }

// call runs an op for the export fn and returns its status, recording the
// message of a failure, and converting a panic into MC_ERR_INTERNAL (or,
// for working memory the system would not give, MC_ERR_OUT_OF_MEMORY).
func call(fn string, op func() error) (st C.mc_status) {
	defer func() {
		if p := recover(); p != nil {
			if e, ok := p.(*core.Error); ok && e.Status == core.ErrOutOfMemory {
				st = fail(fn, e)
				return
			}
			st = fail(fn, core.Errorf(core.ErrInternal, "internal error: %v\n%s", p, debug.Stack()))
		}
	}()
	if err := op(); err != nil {
		return fail(fn, err)
	}
	return C.MC_OK
}

func fail(fn string, err error) C.mc_status {
	msg := fn + ": " + err.Error()
	b := unsafe.StringData(msg)
	C.mc_set_error((*C.char)(unsafe.Pointer(b)), C.size_t(len(msg)))
	return C.mc_status(core.StatusOf(err))
}

//export mcgo_backend_available
func mcgo_backend_available(deviceType C.int32_t) C.int32_t {
	if core.BackendAvailable(int32(deviceType)) {
		return 1
	}
	return 0
}

//export mcgo_cpu_threads
func mcgo_cpu_threads() C.int32_t { return C.int32_t(cpu.Threads()) }

//export mcgo_set_cpu_threads
func mcgo_set_cpu_threads(n C.int32_t) C.mc_status {
	return call("mc_set_cpu_threads", func() error {
		if n < 1 {
			return core.Errorf(core.ErrInvalidArgument, "n is %d; at least 1 thread", n)
		}
		cpu.SetThreads(int(n))
		return nil
	})
}

// isaNames holds a C copy of each instruction set's name, made once: the
// strings mc_cpu_isa returns stay valid for the process's life.
var isaNames sync.Map // name -> *C.char

//export mcgo_cpu_isa
func mcgo_cpu_isa() *C.char {
	name := cpu.K().Name
	if c, ok := isaNames.Load(name); ok {
		return c.(*C.char)
	}
	c, _ := isaNames.LoadOrStore(name, C.CString(name))
	return c.(*C.char)
}

//export mcgo_cuda_prepare
func mcgo_cuda_prepare(deviceID C.int32_t) C.mc_status {
	return call("mc_cuda_prepare", func() error {
		if err := cuda.Available(); err != nil {
			return core.Errorf(core.ErrUnsupportedDevice, "the CUDA backend is unavailable: %v", err)
		}
		return cuda.Backend(cuda.Prepare(int(deviceID)))
	})
}

//export mcgo_metal_prepare
func mcgo_metal_prepare(encoderOrDevice unsafe.Pointer) C.mc_status {
	return call("mc_metal_prepare", func() error { return metal.Prepare(encoderOrDevice) })
}

// core.Tensor must have mc_tensor's exact layout: these constants fail to
// compile (negative array length) when a size or an offset differs.
var (
	_ [unsafe.Sizeof(core.Tensor{}) - C.sizeof_mc_tensor]byte
	_ [C.sizeof_mc_tensor - unsafe.Sizeof(core.Tensor{})]byte
	_ [unsafe.Offsetof(core.Tensor{}.Shape) - unsafe.Offsetof(C.mc_tensor{}.shape)]byte
	_ [unsafe.Offsetof(C.mc_tensor{}.shape) - unsafe.Offsetof(core.Tensor{}.Shape)]byte
	_ [unsafe.Offsetof(core.Tensor{}.ByteOffset) - unsafe.Offsetof(C.mc_tensor{}.byte_offset)]byte
	_ [unsafe.Offsetof(C.mc_tensor{}.byte_offset) - unsafe.Offsetof(core.Tensor{}.ByteOffset)]byte
	_ [unsafe.Offsetof(core.Tensor{}.Code) - unsafe.Offsetof(C.mc_tensor{}.dtype)]byte
	_ [unsafe.Offsetof(C.mc_tensor{}.dtype) - unsafe.Offsetof(core.Tensor{}.Code)]byte
)
