//go:build (darwin || metalsim) && cgo

package metal

/*
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

// The Objective-C runtime and Metal are opened at run time: nothing is
// linked. Every message goes through objc_msgSend cast to the exact
// prototype of the method (arm64 requires it; MTLSize goes by value).
typedef void* mc_id;
typedef void* mc_sel;
typedef struct { unsigned long width, height, depth; } mc_size;

static mc_id (*mc_getClass)(const char*);
static mc_sel (*mc_selector)(const char*);
static void (*mc_msgSend)(void);
static void* (*mc_poolPush)(void);
static void (*mc_poolPop)(void*);
static mc_id (*mc_defaultDevice)(void);

static const char* mc_objc_open(const char* objc_path, const char* foundation_path, const char* metal_path) {
	void* objc = dlopen(objc_path, RTLD_NOW | RTLD_GLOBAL);
	void* foundation = dlopen(foundation_path, RTLD_NOW | RTLD_GLOBAL);
	void* metal = dlopen(metal_path, RTLD_NOW | RTLD_GLOBAL);
	if (!objc || !foundation || !metal) return "libobjc, Foundation or Metal.framework cannot be opened";
	mc_getClass = (mc_id(*)(const char*))dlsym(objc, "objc_getClass");
	mc_selector = (mc_sel(*)(const char*))dlsym(objc, "sel_registerName");
	mc_msgSend = (void (*)(void))dlsym(objc, "objc_msgSend");
	mc_poolPush = (void* (*)(void))dlsym(objc, "objc_autoreleasePoolPush");
	mc_poolPop = (void (*)(void*))dlsym(objc, "objc_autoreleasePoolPop");
	mc_defaultDevice = (mc_id(*)(void))dlsym(metal, "MTLCreateSystemDefaultDevice");
	if (!mc_getClass || !mc_selector || !mc_msgSend || !mc_poolPush || !mc_poolPop || !mc_defaultDevice)
		return "the Objective-C runtime or Metal lacks an entry point";
	return NULL;
}

static mc_id mc_default_device(void) { return mc_defaultDevice(); }
static void* mc_pool_push(void) { return mc_poolPush(); }
static void mc_pool_pop(void* pool) { mc_poolPop(pool); }
static mc_id mc_msg(mc_id o, const char* s) { return ((mc_id(*)(mc_id, mc_sel))mc_msgSend)(o, mc_selector(s)); }
static unsigned long mc_msg_ulong(mc_id o, const char* s) {
	return ((unsigned long (*)(mc_id, mc_sel))mc_msgSend)(o, mc_selector(s));
}
static int mc_responds(mc_id o, const char* s) {
	return ((signed char (*)(mc_id, mc_sel, mc_sel))mc_msgSend)(o, mc_selector("respondsToSelector:"), mc_selector(s)) != 0;
}
static void mc_release(mc_id o) {
	if (o) ((void (*)(mc_id, mc_sel))mc_msgSend)(o, mc_selector("release"));
}
static mc_id mc_string(const char* s) {
	mc_id a = mc_msg(mc_getClass("NSString"), "alloc");
	return ((mc_id(*)(mc_id, mc_sel, const char*))mc_msgSend)(a, mc_selector("initWithUTF8String:"), s);
}
static char* mc_error_text(mc_id err, const char* otherwise) {
	if (!err) return strdup(otherwise);
	const char* s = ((const char* (*)(mc_id, mc_sel))mc_msgSend)(mc_msg(err, "localizedDescription"), mc_selector("UTF8String"));
	return strdup(s ? s : otherwise);
}

// mc_library compiles an MSL program for device, with safe math (the
// default, fast math, would reorder the kernels' float32 sums and assume no
// NaN or infinity) and, where the options have them (macOS 15), precise
// floating-point functions (safe math alone leaves fmax, fmin and fabs at
// their fast, NaN-unaware forms); *err gets a malloc'd message on failure.
static mc_id mc_library(mc_id device, const char* source, char** err) {
	void* pool = mc_poolPush();
	mc_id opts = mc_msg(mc_msg(mc_getClass("MTLCompileOptions"), "alloc"), "init");
	if (mc_responds(opts, "setMathMode:"))
		((void (*)(mc_id, mc_sel, long))mc_msgSend)(opts, mc_selector("setMathMode:"), 0);  // MTLMathModeSafe
	else
		((void (*)(mc_id, mc_sel, signed char))mc_msgSend)(opts, mc_selector("setFastMathEnabled:"), 0);
	if (mc_responds(opts, "setMathFloatingPointFunctions:"))  // MTLMathFloatingPointFunctionsPrecise
		((void (*)(mc_id, mc_sel, long))mc_msgSend)(opts, mc_selector("setMathFloatingPointFunctions:"), 1);
	mc_id src = mc_string(source), e = NULL;
	mc_id lib = ((mc_id(*)(mc_id, mc_sel, mc_id, mc_id, mc_id*))mc_msgSend)(
		device, mc_selector("newLibraryWithSource:options:error:"), src, opts, &e);
	if (!lib) *err = mc_error_text(e, "newLibraryWithSource failed");
	mc_release(src);
	mc_release(opts);
	mc_poolPop(pool);
	return lib;
}

// mc_pipeline is the compute pipeline of library's function name.
static mc_id mc_pipeline(mc_id device, mc_id library, const char* name, char** err) {
	void* pool = mc_poolPush();
	mc_id fname = mc_string(name), e = NULL, pso = NULL;
	mc_id fn = ((mc_id(*)(mc_id, mc_sel, mc_id))mc_msgSend)(library, mc_selector("newFunctionWithName:"), fname);
	mc_release(fname);
	if (!fn) {
		*err = strdup("the compiled library has no such function");
	} else {
		pso = ((mc_id(*)(mc_id, mc_sel, mc_id, mc_id*))mc_msgSend)(
			device, mc_selector("newComputePipelineStateWithFunction:error:"), fn, &e);
		if (!pso) *err = mc_error_text(e, "newComputePipelineStateWithFunction failed");
		mc_release(fn);
	}
	mc_poolPop(pool);
	return pso;
}

static void mc_set_pipeline(mc_id enc, mc_id pso) {
	((void (*)(mc_id, mc_sel, mc_id))mc_msgSend)(enc, mc_selector("setComputePipelineState:"), pso);
}
static void mc_set_buffer(mc_id enc, mc_id buf, unsigned long offset, unsigned long index) {
	((void (*)(mc_id, mc_sel, mc_id, unsigned long, unsigned long))mc_msgSend)(
		enc, mc_selector("setBuffer:offset:atIndex:"), buf, offset, index);
}
static void mc_set_bytes(mc_id enc, const void* data, unsigned long length, unsigned long index) {
	((void (*)(mc_id, mc_sel, const void*, unsigned long, unsigned long))mc_msgSend)(
		enc, mc_selector("setBytes:length:atIndex:"), data, length, index);
}
static void mc_set_group_memory(mc_id enc, unsigned long length) {
	((void (*)(mc_id, mc_sel, unsigned long, unsigned long))mc_msgSend)(
		enc, mc_selector("setThreadgroupMemoryLength:atIndex:"), length, 0);
}
static void mc_use(mc_id enc, mc_id buf, unsigned long usage) {
	((void (*)(mc_id, mc_sel, mc_id, unsigned long))mc_msgSend)(enc, mc_selector("useResource:usage:"), buf, usage);
}
static void mc_barrier(mc_id enc) {  // MTLBarrierScopeBuffers
	((void (*)(mc_id, mc_sel, unsigned long))mc_msgSend)(enc, mc_selector("memoryBarrierWithScope:"), 1);
}
static void mc_dispatch(mc_id enc, unsigned long groups, unsigned long threads) {
	mc_size g = {groups, 1, 1}, t = {threads, 1, 1};
	((void (*)(mc_id, mc_sel, mc_size, mc_size))mc_msgSend)(
		enc, mc_selector("dispatchThreadgroups:threadsPerThreadgroup:"), g, t);
}
*/
import "C"

import (
	"errors"
	"fmt"
	goruntime "runtime"
	"sync"
	"unsafe"

	"metalcore/internal/core"
)

func init() { Use(&darwin{devices: map[unsafe.Pointer]*deviceState{}}) }

// darwin is the Metal runtime: pipelines compiled once per device from the
// op families' MSL programs, and plans translated into messages to the
// host's compute encoder (never ended, committed or waited on).
type darwin struct {
	openOnce sync.Once
	openErr  error
	mu       sync.Mutex
	devices  map[unsafe.Pointer]*deviceState
}

// deviceState is one MTLDevice's libraries (by program) and pipelines (by
// kernel); compiled once, kept for the process.
type deviceState struct {
	mu        sync.Mutex
	libraries map[string]C.mc_id
	pipelines map[string]pipeline
}

type pipeline struct {
	pso        C.mc_id
	maxThreads int
}

func (d *darwin) Available() error {
	d.openOnce.Do(func() {
		objc, foundation, metal, err := frameworks()
		if err != nil {
			d.openErr = err
			return
		}
		cobjc, cfoundation, cmetal := C.CString(objc), C.CString(foundation), C.CString(metal)
		defer C.free(unsafe.Pointer(cobjc))
		defer C.free(unsafe.Pointer(cfoundation))
		defer C.free(unsafe.Pointer(cmetal))
		if msg := C.mc_objc_open(cobjc, cfoundation, cmetal); msg != nil {
			d.openErr = errors.New(C.GoString(msg))
		} else if C.mc_default_device() == nil {
			d.openErr = errors.New("Metal reports no device")
		}
	})
	return d.openErr
}

func (d *darwin) device(dev C.mc_id) *deviceState {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.devices[unsafe.Pointer(dev)]
	if s == nil {
		s = &deviceState{libraries: map[string]C.mc_id{}, pipelines: map[string]pipeline{}}
		d.devices[unsafe.Pointer(dev)] = s
	}
	return s
}

// pipeline compiles (once) kernel's pipeline on dev.
func (d *darwin) pipeline(dev C.mc_id, kernel string) (pipeline, error) {
	s := d.device(dev)
	s.mu.Lock()
	defer s.mu.Unlock()
	if p, ok := s.pipelines[kernel]; ok {
		return p, nil
	}
	src, err := Source(kernel)
	if err != nil {
		return pipeline{}, err
	}
	lib, ok := s.libraries[src]
	if !ok {
		csrc := C.CString(src)
		defer C.free(unsafe.Pointer(csrc))
		var msg *C.char
		if lib = C.mc_library(dev, csrc, &msg); lib == nil {
			defer C.free(unsafe.Pointer(msg))
			return pipeline{}, fmt.Errorf("compiling the MSL of %s: %s", kernel, C.GoString(msg))
		}
		s.libraries[src] = lib
	}
	name := C.CString(kernel)
	defer C.free(unsafe.Pointer(name))
	var msg *C.char
	pso := C.mc_pipeline(dev, lib, name, &msg)
	if pso == nil {
		defer C.free(unsafe.Pointer(msg))
		return pipeline{}, fmt.Errorf("the pipeline of %s: %s", kernel, C.GoString(msg))
	}
	// every reduction is written for SIMD groups of 32 threads
	if w := int(C.mc_msg_ulong(pso, cstr("threadExecutionWidth"))); w != SIMDWidth {
		C.mc_release(pso)
		return pipeline{}, core.Errorf(core.ErrUnsupportedDevice,
			"the device runs SIMD groups of %d threads; metalcore's kernels are written for %d", w, SIMDWidth)
	}
	p := pipeline{pso: pso, maxThreads: int(C.mc_msg_ulong(pso, cstr("maxTotalThreadsPerThreadgroup")))}
	s.pipelines[kernel] = p
	return p, nil
}

// selectors' names as C strings, made once
var (
	cstrMu sync.Mutex
	cstrs  = map[string]*C.char{}
)

func cstr(s string) *C.char {
	cstrMu.Lock()
	defer cstrMu.Unlock()
	c, ok := cstrs[s]
	if !ok {
		c = C.CString(s)
		cstrs[s] = c
	}
	return c
}

func deviceOf(encoder unsafe.Pointer) C.mc_id { return C.mc_msg(C.mc_id(encoder), cstr("device")) }

// inPool runs f on one OS thread inside an autorelease pool: the host's
// thread (Python's, say) may have none, and Metal autoreleases what its
// methods return.
func inPool(f func()) {
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	pool := C.mc_pool_push()
	defer C.mc_pool_pop(pool)
	f()
}

func (d *darwin) MaxThreads(encoder unsafe.Pointer, kernel string) (n int, err error) {
	inPool(func() { n, err = d.maxThreads(encoder, kernel) })
	return n, err
}

func (d *darwin) maxThreads(encoder unsafe.Pointer, kernel string) (int, error) {
	p, err := d.pipeline(deviceOf(encoder), kernel)
	return p.maxThreads, err
}

func (d *darwin) GPUAddress(buffer unsafe.Pointer) (a uint64, err error) {
	inPool(func() {
		if C.mc_responds(C.mc_id(buffer), cstr("gpuAddress")) == 0 {
			err = errors.New("the buffer has no gpuAddress (AdamW's tensor tables need Metal 3: macOS 13 and an Apple GPU)")
			return
		}
		a = uint64(C.mc_msg_ulong(C.mc_id(buffer), cstr("gpuAddress")))
	})
	return a, err
}

func (d *darwin) Prepare(encoderOrDevice unsafe.Pointer) (err error) {
	inPool(func() { err = d.prepare(encoderOrDevice) })
	return err
}

func (d *darwin) prepare(encoderOrDevice unsafe.Pointer) error {
	dev := C.mc_id(encoderOrDevice)
	if C.mc_responds(dev, cstr("newLibraryWithSource:options:error:")) == 0 {
		dev = deviceOf(encoderOrDevice)
	}
	names, err := AllKernels()
	if err != nil {
		return err
	}
	for _, name := range names {
		if _, err := d.pipeline(dev, name); err != nil {
			return err
		}
	}
	return nil
}

// Encode checks the plan against the device (pipelines, buffer lengths and
// devices, threadgroup sizes), then encodes it. On a concurrent encoder
// (MLX's) the host's dispatches before and after the call are not ordered
// with the call's by anything else: a buffer-scope barrier goes before the
// first dispatch and after the last.
func (d *darwin) Encode(encoder unsafe.Pointer, commands []Command) (err error) {
	inPool(func() { err = d.encode(encoder, commands) })
	return err
}

func (d *darwin) encode(encoder unsafe.Pointer, commands []Command) error {
	enc := C.mc_id(encoder)
	dev := deviceOf(encoder)
	psos := make([]C.mc_id, len(commands))
	for i, c := range commands {
		p, err := d.pipeline(dev, c.Kernel)
		if err != nil {
			return err
		}
		if c.Threads > p.maxThreads {
			return fmt.Errorf("%s: %d threads a threadgroup, its pipeline takes %d", c.Kernel, c.Threads, p.maxThreads)
		}
		psos[i] = p.pso
	}
	err := CheckBuffers(commands,
		func(b unsafe.Pointer) uint64 { return uint64(C.mc_msg_ulong(C.mc_id(b), cstr("length"))) },
		func(b unsafe.Pointer) bool { return C.mc_msg(C.mc_id(b), cstr("device")) == dev })
	if err != nil {
		return err
	}
	concurrent := C.mc_responds(enc, cstr("dispatchType")) != 0 && C.mc_msg_ulong(enc, cstr("dispatchType")) == 1
	for i, c := range commands {
		if c.Barrier || i == 0 && concurrent {
			C.mc_barrier(enc)
		}
		C.mc_set_pipeline(enc, psos[i])
		for _, b := range c.Buffers {
			C.mc_set_buffer(enc, C.mc_id(b.Buffer), C.ulong(b.Offset), C.ulong(b.Index))
		}
		for _, v := range c.Values {
			C.mc_set_bytes(enc, unsafe.Pointer(&v.Data[0]), C.ulong(len(v.Data)), C.ulong(v.Index))
		}
		for _, r := range c.Resources {
			usage := C.ulong(1) // MTLResourceUsageRead
			if r.Write {
				usage |= 2 // MTLResourceUsageWrite
			}
			C.mc_use(enc, C.mc_id(r.Buffer), usage)
		}
		if c.GroupMemory > 0 {
			C.mc_set_group_memory(enc, C.ulong((c.GroupMemory+15)/16*16))
		}
		C.mc_dispatch(enc, C.ulong(c.Groups), C.ulong(c.Threads))
	}
	if concurrent {
		C.mc_barrier(enc)
	}
	return nil
}
