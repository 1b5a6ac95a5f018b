//go:build metalsim && cgo

package testutil

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

static void* sim;
static void* (*new_buffer)(unsigned long);
static void* (*contents)(void*);
static void (*release_)(void*);
static void* (*begin)(int);
static void (*finish)(void*);
static void (*host_copy)(void*, void*, unsigned long, void*, unsigned long, unsigned long);
static void (*library)(int);
static int (*config)(const char*, long);
static char* (*errors_)(void);
static void (*plant)(const char*, const char*);
static void (*raw)(void*, const char*, const char*, void* const*, int, const void*, unsigned long, int, unsigned long,
                   unsigned long);

static const char* sim_open(const char* path) {
	sim = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
	if (!sim) return dlerror();
	new_buffer = dlsym(sim, "mcsim_new_buffer");
	contents = dlsym(sim, "mcsim_contents");
	release_ = dlsym(sim, "mcsim_release");
	begin = dlsym(sim, "mcsim_begin");
	finish = dlsym(sim, "mcsim_finish");
	host_copy = dlsym(sim, "mcsim_host_copy");
	library = dlsym(sim, "mcsim_library");
	config = dlsym(sim, "mcsim_config");
	errors_ = dlsym(sim, "mcsim_errors");
	plant = dlsym(sim, "mcsim_plant");
	raw = dlsym(sim, "mcsim_raw");
	if (!new_buffer || !contents || !release_ || !begin || !finish || !host_copy || !library || !config || !errors_ ||
	    !plant || !raw)
		return "the Metal simulator lacks a control function";
	return NULL;
}
static void* sim_new_buffer(unsigned long n) { return new_buffer(n); }
static void* sim_contents(void* b) { return contents(b); }
static void sim_release(void* o) { release_(o); }
static void* sim_begin(int concurrent) { return begin(concurrent); }
static void sim_finish(void* e) { finish(e); }
static void sim_host_copy(void* e, void* dst, unsigned long doff, void* src, unsigned long soff, unsigned long n) {
	host_copy(e, dst, doff, src, soff, n);
}
static void sim_library(int inside) { library(inside); }
static int sim_config(const char* key, long v) { return config(key, v); }
static char* sim_errors(void) { return errors_(); }
static void sim_plant(const char* from, const char* to) { plant(from, to); }
static void sim_raw(void* e, const char* src, const char* kernel, void* const* bufs, int n, const void* bytes,
                    unsigned long nbytes, int index, unsigned long group, unsigned long threads) {
	raw(e, src, kernel, bufs, n, bytes, nbytes, index, group, threads);
}
*/
import "C"

import (
	"fmt"
	"os"
	"sync"
	"unsafe"

	"metalcore/internal/core"
)

// The Metal simulator (tests/metal/sim) as a test device: a metalsim build
// makes Metal tensors in its buffers. A tensor's host copy reaches its
// buffer, and comes back, through the host's own dispatches on the current
// encoder (a copy kernel), as a framework's would: so every op call on the
// simulator has a host dispatch before it and one after it, on the same
// encoder, which is concurrent unless MetalSerial is set.
var (
	simOnce sync.Once
	simErr  error
	simMu   sync.Mutex
	encoder unsafe.Pointer // the open encoder, nil when none
	// buffers of tensors collected: released at the next flush, since a
	// tensor may be collected while a library call still encodes its
	// buffer (the call keeps the buffer, not the Go value)
	freed []unsafe.Pointer
	// MetalSerial makes the next encoders serial (MTLDispatchTypeSerial).
	MetalSerial bool
)

// MetalSim opens the simulator MC_METAL_SIM names (once).
func MetalSim() error {
	simOnce.Do(func() {
		path := os.Getenv("MC_METAL_SIM")
		if path == "" {
			simErr = fmt.Errorf("MC_METAL_SIM does not name the Metal simulator's library")
			return
		}
		cpath := C.CString(path)
		defer C.free(unsafe.Pointer(cpath))
		if msg := C.sim_open(cpath); msg != nil {
			simErr = fmt.Errorf("the Metal simulator: %s", C.GoString(msg))
			return
		}
		gpuAlloc[core.DeviceMetal] = newSimMemory
	})
	return simErr
}

// MetalEncoder is the open encoder, begun on a new command buffer when
// none is: what a test passes to a Metal op.
func MetalEncoder() unsafe.Pointer {
	simMu.Lock()
	defer simMu.Unlock()
	return openEncoder()
}

func openEncoder() unsafe.Pointer {
	if encoder == nil {
		concurrent := C.int(1)
		if MetalSerial {
			concurrent = 0
		}
		encoder = C.sim_begin(concurrent)
	}
	return encoder
}

// MetalFlush ends the open encoder and runs its command buffer.
func MetalFlush() {
	simMu.Lock()
	defer simMu.Unlock()
	flush()
}

func flush() {
	if encoder != nil {
		C.sim_finish(encoder)
		encoder = nil
	}
	for _, b := range freed {
		C.sim_release(b)
	}
	freed = nil
}

// MetalCall runs f as the library's call: inside it the simulator reports
// every message only a host may send (ending, committing, waiting, new
// buffers) and every message sent with no autorelease pool in place.
func MetalCall(f func() error) error {
	C.sim_library(1)
	defer C.sim_library(0)
	return f()
}

// MetalErrors is what the simulator found since the last call ("" when
// nothing): validation failures, races, out-of-bounds or unbound accesses.
func MetalErrors() string {
	c := C.sim_errors()
	defer C.free(unsafe.Pointer(c))
	return C.GoString(c)
}

// MetalConfig sets one of the simulator's settings (its device's limits,
// or a planted defect).
func MetalConfig(key string, value int) {
	ckey := C.CString(key)
	defer C.free(unsafe.Pointer(ckey))
	if C.sim_config(ckey, C.long(value)) != 0 {
		panic("the Metal simulator has no setting " + key)
	}
}

// simMemory is a tensor's MTLBuffer and a staging buffer of the same
// length, which the host writes and reads directly.
type simMemory struct {
	buf, staging unsafe.Pointer
	bytes        int
	copying      unsafe.Pointer // the encoder whose copy reads staging
	queued       bool           // a dispatch has used buf
}

func newSimMemory(bytes int) (Memory, error) {
	m := &simMemory{buf: C.sim_new_buffer(C.ulong(bytes)), staging: C.sim_new_buffer(C.ulong(bytes)), bytes: bytes}
	if m.buf == nil || m.staging == nil {
		return nil, fmt.Errorf("the Metal simulator cannot make a %d-byte buffer", bytes)
	}
	return m, nil
}

func (m *simMemory) Handle() unsafe.Pointer { return m.buf }

// CopyIn writes a buffer no dispatch has used yet directly (a new tensor's
// poison: an output's is never the host's write in the call's encoder, so
// the host's next dispatch, reading it, is ordered after the call's by the
// call's own closing barrier alone), and any other by the host's copy
// dispatch on the open encoder.
func (m *simMemory) CopyIn(src unsafe.Pointer) error {
	simMu.Lock()
	defer simMu.Unlock()
	if !m.queued {
		C.memcpy(C.sim_contents(m.buf), src, C.size_t(m.bytes))
		m.queued = true
		return nil
	}
	if m.copying != nil && m.copying == encoder {
		flush() // the open encoder's copy still reads staging
	}
	C.memcpy(C.sim_contents(m.staging), src, C.size_t(m.bytes))
	m.copying = openEncoder()
	C.sim_host_copy(m.copying, m.buf, 0, m.staging, 0, C.ulong(m.bytes))
	return nil
}

func (m *simMemory) CopyOut(dst unsafe.Pointer) error {
	simMu.Lock()
	defer simMu.Unlock()
	C.sim_host_copy(openEncoder(), m.staging, 0, m.buf, 0, C.ulong(m.bytes))
	flush()
	C.memcpy(dst, C.sim_contents(m.staging), C.size_t(m.bytes))
	return nil
}

// Free releases the buffers at the next flush (a finalizer's).
func (m *simMemory) Free() error {
	simMu.Lock()
	defer simMu.Unlock()
	freed = append(freed, m.buf, m.staging)
	return nil
}

// MetalPlant makes every MSL source the simulator compiles from now on
// have from replaced by to (a planted defect; MetalConfig("new_device", 1)
// makes the library compile its pipelines again). MetalConfig("plant_clear",
// 0) removes every plant.
func MetalPlant(from, to string) {
	cfrom, cto := C.CString(from), C.CString(to)
	defer C.free(unsafe.Pointer(cfrom))
	defer C.free(unsafe.Pointer(cto))
	C.sim_plant(cfrom, cto)
}

// MetalRaw encodes one dispatch of kernel, from its MSL source, on the open
// encoder as a defective caller might: buffers at indices 0.. as given (nil
// included), bytes at index, length bytes of threadgroup memory, one
// threadgroup of threads.
func MetalRaw(source, kernel string, buffers []unsafe.Pointer, bytes []byte, index, length, threads int) {
	simMu.Lock()
	defer simMu.Unlock()
	csrc, ck := C.CString(source), C.CString(kernel)
	defer C.free(unsafe.Pointer(csrc))
	defer C.free(unsafe.Pointer(ck))
	cbufs := C.malloc(C.size_t(8 * (len(buffers) + 1)))
	defer C.free(cbufs)
	for i, b := range buffers {
		*(*unsafe.Pointer)(unsafe.Add(cbufs, 8*i)) = b
	}
	var cbytes unsafe.Pointer
	if len(bytes) > 0 {
		cbytes = C.CBytes(bytes)
		defer C.free(cbytes)
	}
	C.sim_raw(openEncoder(), csrc, ck, (*unsafe.Pointer)(cbufs), C.int(len(buffers)), cbytes, C.ulong(len(bytes)), C.int(index),
		C.ulong(length), C.ulong(threads))
}
