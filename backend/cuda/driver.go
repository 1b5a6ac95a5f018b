//go:build linux && cgo

package cuda

/*
#cgo LDFLAGS: -ldl
// The per-call helpers keep no Go pointer and never call Go: their pointer
// arguments need not escape to the heap (an allocation per launch and per
// pointer check otherwise).
#cgo noescape mc_launch_in
#cgo nocallback mc_launch_in
#cgo noescape mc_pointer_range
#cgo nocallback mc_pointer_range
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef int CUdevice;
typedef void* CUcontext;
typedef void* CUmodule;
typedef void* CUfunction;
typedef void* CUstream;
typedef unsigned long long CUdeviceptr;
typedef int nvrtcResult;
enum { MC_MAX_PARAMS = 32 };  // kernel parameters a launch passes at most (cuda.go's maxParams)
typedef void* nvrtcProgram;

// Entry points resolved with dlsym at first use: nothing of CUDA is needed
// to build or load the library. Go cannot call C function pointers, so each
// has a small trampoline below.
static CUresult (*p_cuInit)(unsigned);
static CUresult (*p_cuDriverGetVersion)(int*);
static CUresult (*p_cuDeviceGetCount)(int*);
static CUresult (*p_cuDeviceGet)(CUdevice*, int);
static CUresult (*p_cuDeviceGetAttribute)(int*, int, CUdevice);
static CUresult (*p_cuCtxGetCurrent)(CUcontext*);
static CUresult (*p_cuCtxGetDevice)(CUdevice*);
static CUresult (*p_cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
static CUresult (*p_cuCtxPushCurrent)(CUcontext);
static CUresult (*p_cuCtxPopCurrent)(CUcontext*);
static CUresult (*p_cuModuleLoadData)(CUmodule*, const void*);
static CUresult (*p_cuModuleGetFunction)(CUfunction*, CUmodule, const char*);
static CUresult (*p_cuFuncGetAttribute)(int*, int, CUfunction);
static CUresult (*p_cuFuncSetAttribute)(CUfunction, int, int);
static CUresult (*p_cuOccupancyMaxActiveBlocksPerMultiprocessor)(int*, CUfunction, int, size_t);
static CUresult (*p_cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                    CUstream, void**, void**);
static CUresult (*p_cuLaunchCooperativeKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                               unsigned, CUstream, void**);
static CUresult (*p_cuFuncGetParamInfo)(CUfunction, size_t, size_t*, size_t*);  // CUDA 12.4+; may be absent
static CUresult (*p_cuPointerGetAttribute)(void*, int, CUdeviceptr);
static CUresult (*p_cuStreamIsCapturing)(CUstream, int*);
static CUresult (*p_cuGetErrorString)(CUresult, const char**);
static CUresult (*p_cuMemAlloc)(CUdeviceptr*, size_t);
static CUresult (*p_cuMemFree)(CUdeviceptr);
static CUresult (*p_cuMemcpyHtoD)(CUdeviceptr, const void*, size_t);
static CUresult (*p_cuMemcpyDtoH)(void*, CUdeviceptr, size_t);
static CUresult (*p_cuCtxSynchronize)(void);
static nvrtcResult (*p_nvrtcVersion)(int*, int*);
static nvrtcResult (*p_nvrtcCreateProgram)(nvrtcProgram*, const char*, const char*, int, const char* const*,
                                           const char* const*);
static nvrtcResult (*p_nvrtcCompileProgram)(nvrtcProgram, int, const char* const*);
static nvrtcResult (*p_nvrtcGetProgramLogSize)(nvrtcProgram, size_t*);
static nvrtcResult (*p_nvrtcGetProgramLog)(nvrtcProgram, char*);
static nvrtcResult (*p_nvrtcGetCUBINSize)(nvrtcProgram, size_t*);
static nvrtcResult (*p_nvrtcGetCUBIN)(nvrtcProgram, char*);
static nvrtcResult (*p_nvrtcGetPTXSize)(nvrtcProgram, size_t*);
static nvrtcResult (*p_nvrtcGetPTX)(nvrtcProgram, char*);
static nvrtcResult (*p_nvrtcDestroyProgram)(nvrtcProgram*);

static char mc_cuda_why[512];

#define SYM(lib, var, name)                                                                   \
    if (!(*(void**)&var = dlsym(lib, name))) {                                                \
        snprintf(mc_cuda_why, sizeof mc_cuda_why, "%s lacks %s", #lib, name);               \
        return mc_cuda_why;                                                                   \
    }

#include <stdio.h>
// mc_cuda_open loads the driver and NVRTC; it returns NULL or why not.
static const char* mc_cuda_open(const char* cuda_path, const char* nvrtc_path) {
    void* libcuda = dlopen(cuda_path, RTLD_NOW | RTLD_LOCAL);
    if (!libcuda) {
        snprintf(mc_cuda_why, sizeof mc_cuda_why, "no NVIDIA driver: dlopen %s: %s", cuda_path, dlerror());
        return mc_cuda_why;
    }
    void* libnvrtc = 0;
    const char* names[] = {nvrtc_path, "libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};
    for (int i = nvrtc_path ? 0 : 1; i < 4 && !libnvrtc; i++) {
        libnvrtc = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (nvrtc_path) break;
    }
    if (!libnvrtc) {
        snprintf(mc_cuda_why, sizeof mc_cuda_why, "no NVRTC (libnvrtc.so.13, .12 or libnvrtc.so): %s", dlerror());
        return mc_cuda_why;
    }
    SYM(libcuda, p_cuInit, "cuInit");
    SYM(libcuda, p_cuDriverGetVersion, "cuDriverGetVersion");
    SYM(libcuda, p_cuDeviceGetCount, "cuDeviceGetCount");
    SYM(libcuda, p_cuDeviceGet, "cuDeviceGet");
    SYM(libcuda, p_cuDeviceGetAttribute, "cuDeviceGetAttribute");
    SYM(libcuda, p_cuCtxGetCurrent, "cuCtxGetCurrent");
    SYM(libcuda, p_cuCtxGetDevice, "cuCtxGetDevice");
    SYM(libcuda, p_cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
    SYM(libcuda, p_cuCtxPushCurrent, "cuCtxPushCurrent_v2");
    SYM(libcuda, p_cuCtxPopCurrent, "cuCtxPopCurrent_v2");
    SYM(libcuda, p_cuModuleLoadData, "cuModuleLoadData");
    SYM(libcuda, p_cuModuleGetFunction, "cuModuleGetFunction");
    SYM(libcuda, p_cuLaunchKernel, "cuLaunchKernel");
    SYM(libcuda, p_cuLaunchCooperativeKernel, "cuLaunchCooperativeKernel");
    *(void**)&p_cuFuncGetParamInfo = dlsym(libcuda, "cuFuncGetParamInfo");
    SYM(libcuda, p_cuFuncGetAttribute, "cuFuncGetAttribute");
    SYM(libcuda, p_cuOccupancyMaxActiveBlocksPerMultiprocessor, "cuOccupancyMaxActiveBlocksPerMultiprocessor");
    SYM(libcuda, p_cuFuncSetAttribute, "cuFuncSetAttribute");
    SYM(libcuda, p_cuPointerGetAttribute, "cuPointerGetAttribute");
    SYM(libcuda, p_cuStreamIsCapturing, "cuStreamIsCapturing");
    SYM(libcuda, p_cuGetErrorString, "cuGetErrorString");
    SYM(libcuda, p_cuMemAlloc, "cuMemAlloc_v2");
    SYM(libcuda, p_cuMemFree, "cuMemFree_v2");
    SYM(libcuda, p_cuMemcpyHtoD, "cuMemcpyHtoD_v2");
    SYM(libcuda, p_cuMemcpyDtoH, "cuMemcpyDtoH_v2");
    SYM(libcuda, p_cuCtxSynchronize, "cuCtxSynchronize");
    SYM(libnvrtc, p_nvrtcVersion, "nvrtcVersion");
    SYM(libnvrtc, p_nvrtcCreateProgram, "nvrtcCreateProgram");
    SYM(libnvrtc, p_nvrtcCompileProgram, "nvrtcCompileProgram");
    SYM(libnvrtc, p_nvrtcGetProgramLogSize, "nvrtcGetProgramLogSize");
    SYM(libnvrtc, p_nvrtcGetProgramLog, "nvrtcGetProgramLog");
    SYM(libnvrtc, p_nvrtcGetCUBINSize, "nvrtcGetCUBINSize");
    SYM(libnvrtc, p_nvrtcGetCUBIN, "nvrtcGetCUBIN");
    SYM(libnvrtc, p_nvrtcGetPTXSize, "nvrtcGetPTXSize");
    SYM(libnvrtc, p_nvrtcGetPTX, "nvrtcGetPTX");
    SYM(libnvrtc, p_nvrtcDestroyProgram, "nvrtcDestroyProgram");
    CUresult r = p_cuInit(0);
    if (r != 0) {
        snprintf(mc_cuda_why, sizeof mc_cuda_why, "cuInit failed (CUresult %d): no usable GPU", r);
        return mc_cuda_why;
    }
    int n = 0;
    if (p_cuDeviceGetCount(&n) != 0 || n == 0) return "the NVIDIA driver reports no GPU";
    return 0;
}

static const char* mc_cu_error(CUresult r) {
    const char* s = 0;
    if (p_cuGetErrorString && p_cuGetErrorString(r, &s) == 0 && s) return s;
    return "unknown CUDA error";
}

static CUresult mc_device_count(int* n) { return p_cuDeviceGetCount(n); }
static CUresult mc_compute_capability(int dev, int* major, int* minor) {
    CUdevice d;
    CUresult r = p_cuDeviceGet(&d, dev);
    if (r) return r;
    if ((r = p_cuDeviceGetAttribute(major, 75, d))) return r;  // COMPUTE_CAPABILITY_MAJOR
    return p_cuDeviceGetAttribute(minor, 76, d);               // COMPUTE_CAPABILITY_MINOR
}
static CUresult mc_sm_count(int dev, int* n) {
    CUdevice d;
    CUresult r = p_cuDeviceGet(&d, dev);
    if (r) return r;
    return p_cuDeviceGetAttribute(n, 16, d);  // MULTIPROCESSOR_COUNT
}

// mc_enter makes a context of device dev current: the calling thread's own
// if it is on dev, else dev's primary context (PyTorch's), pushed; *pushed
// says whether mc_leave must pop it.
static CUresult mc_enter(int dev, CUcontext primary, int* pushed) {
    CUcontext cur = 0;
    *pushed = 0;
    CUresult r = p_cuCtxGetCurrent(&cur);
    if (r) return r;
    if (cur == primary) return 0;  // the usual case under PyTorch: no query needed
    if (cur) {
        CUdevice d;
        if ((r = p_cuCtxGetDevice(&d))) return r;
        if (d == dev) return 0;
    }
    if ((r = p_cuCtxPushCurrent(primary))) return r;
    *pushed = 1;
    return 0;
}
static CUresult mc_retain_primary(int dev, CUcontext* primary) {
    CUdevice d;
    CUresult r = p_cuDeviceGet(&d, dev);
    if (r) return r;
    return p_cuDevicePrimaryCtxRetain(primary, d);
}
static void mc_leave(int pushed) {
    CUcontext c;
    if (pushed) p_cuCtxPopCurrent(&c);
}

// mc_pointer_range: the device ordinal owning p and the allocation holding
// it (start address, bytes).
static CUresult mc_pointer_range(uintptr_t p, int* ordinal, CUdeviceptr* start, size_t* size) {
    CUresult r = p_cuPointerGetAttribute(ordinal, 9, (CUdeviceptr)p);  // CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
    if (!r) r = p_cuPointerGetAttribute(start, 11, (CUdeviceptr)p);     // RANGE_START_ADDR
    if (!r) r = p_cuPointerGetAttribute(size, 12, (CUdeviceptr)p);      // RANGE_SIZE
    return r;
}
static CUresult mc_is_capturing(uintptr_t stream, int* capturing) {
    return p_cuStreamIsCapturing((CUstream)stream, capturing);
}

// mc_versions: the driver's CUDA version (e.g. 13000) and NVRTC's.
static void mc_versions(int* driver, int* nvrtc_major, int* nvrtc_minor) {
    *driver = *nvrtc_major = *nvrtc_minor = 0;
    p_cuDriverGetVersion(driver);
    p_nvrtcVersion(nvrtc_major, nvrtc_minor);
}

// mc_compile compiles src with NVRTC's options opts; on success *image
// (malloc'd, *size bytes) is the cubin (cubin != 0) or the PTX, on failure
// *log (malloc'd) is NVRTC's log. Distinct programs may compile at once on
// several threads.
static int mc_compile(const char* src, const char* const* opts, int nopts, int cubin, char** image, size_t* size,
                      char** log) {
    nvrtcProgram prog;
    *image = *log = 0;
    *size = 0;
    if (p_nvrtcCreateProgram(&prog, src, "metalcore.cu", 0, 0, 0)) return -1;
    int res = p_nvrtcCompileProgram(prog, nopts, opts);
    if (res) {
        size_t n = 0;
        p_nvrtcGetProgramLogSize(prog, &n);
        *log = malloc(n + 1);
        p_nvrtcGetProgramLog(prog, *log);
        (*log)[n] = 0;
    } else {
        (cubin ? p_nvrtcGetCUBINSize : p_nvrtcGetPTXSize)(prog, size);
        *image = malloc(*size);
        (cubin ? p_nvrtcGetCUBIN : p_nvrtcGetPTX)(prog, *image);
    }
    p_nvrtcDestroyProgram(&prog);
    return res;
}

static CUresult mc_load(const void* image, CUmodule* mod) { return p_cuModuleLoadData(mod, image); }
// mc_function looks up a kernel, the most threads a block of it may have
// (its registers allowing), and its parameters as the driver knows them:
// their count and largest size (-1 where this driver cannot say).
static CUresult mc_function(CUmodule mod, const char* name, CUfunction* f, int* max_threads, int* params,
                            int* max_param) {
    CUresult r = p_cuModuleGetFunction(f, mod, name);
    if (r) return r;
    *params = *max_param = -1;
    if (p_cuFuncGetParamInfo) {
        size_t offset, size;
        int n = 0, largest = 0;
        while (n <= MC_MAX_PARAMS && p_cuFuncGetParamInfo(*f, (size_t)n, &offset, &size) == 0) {
            if ((int)size > largest) largest = (int)size;
            n++;
        }
        *params = n;
        *max_param = largest;
    }
    return p_cuFuncGetAttribute(max_threads, 0, *f);  // MAX_THREADS_PER_BLOCK
}

static CUresult mc_resident(CUfunction f, int threads, int* blocks) {
    return p_cuOccupancyMaxActiveBlocksPerMultiprocessor(blocks, f, threads, 0);
}

// mc_allow_shared lets f take n bytes of dynamic shared memory (above the
// default 48 KiB a kernel must opt in).
static CUresult mc_allow_shared(CUfunction f, int n) {
    return p_cuFuncSetAttribute(f, 8, n);  // MAX_DYNAMIC_SHARED_SIZE_BYTES
}

// mc_launch launches f with n parameters (at most MC_MAX_PARAMS: the Go
// side checks), parameter i being the bytes at args + 8*i; cooperative: all
// blocks resident at once, or CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE.
static CUresult mc_launch(CUfunction f, unsigned gx, unsigned bx, unsigned shmem, uintptr_t stream, void* args,
                          int n, int cooperative) {
    void* params[MC_MAX_PARAMS];
    if (n > MC_MAX_PARAMS) return 1;  // CUDA_ERROR_INVALID_VALUE
    for (int i = 0; i < n; i++) params[i] = (char*)args + 8 * i;
    if (cooperative) return p_cuLaunchCooperativeKernel(f, gx, 1, 1, bx, 1, 1, shmem, (CUstream)stream, params);
    return p_cuLaunchKernel(f, gx, 1, 1, bx, 1, 1, shmem, (CUstream)stream, params, 0);
}

// mc_launch_in launches f within dev's context (entered as mc_enter does,
// left after): one cgo call per launch, during which the calling thread
// cannot change.
static CUresult mc_launch_in(int dev, CUcontext primary, CUfunction f, unsigned gx, unsigned bx, unsigned shmem,
                             uintptr_t stream, void* args, int n, int cooperative) {
    int pushed;
    CUresult r = mc_enter(dev, primary, &pushed);
    if (r) return r;
    if (shmem > 48 * 1024) r = mc_allow_shared(f, (int)shmem);
    if (!r) r = mc_launch(f, gx, bx, shmem, stream, args, n, cooperative);
    mc_leave(pushed);
    return r;
}

// test support
static CUresult mc_alloc(size_t n, void** p) {
    CUdeviceptr d = 0;
    CUresult r = p_cuMemAlloc(&d, n);
    *p = (void*)d;
    return r;
}
static CUresult mc_free(uintptr_t p) { return p_cuMemFree((CUdeviceptr)p); }
static CUresult mc_htod(uintptr_t dst, const void* src, size_t n) { return p_cuMemcpyHtoD((CUdeviceptr)dst, src, n); }
static CUresult mc_dtoh(void* dst, uintptr_t src, size_t n) { return p_cuMemcpyDtoH(dst, (CUdeviceptr)src, n); }
static CUresult mc_sync(void) { return p_cuCtxSynchronize(); }
*/
import "C"

import (
	"fmt"
	"runtime"
	"strings"
	"unsafe"
)

func open(cudaPath, nvrtcPath string) error {
	cp := C.CString(cudaPath)
	defer C.free(unsafe.Pointer(cp))
	var np *C.char
	if nvrtcPath != "" {
		np = C.CString(nvrtcPath)
		defer C.free(unsafe.Pointer(np))
	}
	if why := C.mc_cuda_open(cp, np); why != nil {
		return fmt.Errorf("%s", C.GoString(why))
	}
	return nil
}

func check(what string, r C.CUresult) error {
	if r == 0 {
		return nil
	}
	return fmt.Errorf("%s: %s (CUresult %d)", what, C.GoString(C.mc_cu_error(r)), int(r))
}

func deviceCount() (int, error) {
	var n C.int
	return int(n), check("cuDeviceGetCount", C.mc_device_count(&n))
}

func computeCapability(dev int) (int, int, error) {
	var major, minor C.int
	err := check("cuDeviceGetAttribute", C.mc_compute_capability(C.int(dev), &major, &minor))
	return int(major), int(minor), err
}

func smCount(dev int) (int, error) {
	var n C.int
	return int(n), check("cuDeviceGetAttribute", C.mc_sm_count(C.int(dev), &n))
}

// context is a device's primary context, retained once.
type context struct{ primary C.CUcontext }

func retainPrimary(dev int) (context, error) {
	var c context
	return c, check("cuDevicePrimaryCtxRetain", C.mc_retain_primary(C.int(dev), &c.primary))
}

// enter makes a context on dev current and returns the function undoing it.
// A context is current per OS thread, so the goroutine stays on its thread
// in between.
func (c *context) enter(dev int) (func(), error) {
	runtime.LockOSThread()
	var pushed C.int
	if err := check("making a context current", C.mc_enter(C.int(dev), c.primary, &pushed)); err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	return func() {
		C.mc_leave(pushed)
		runtime.UnlockOSThread()
	}, nil
}

// pointerRange is the device ordinal owning p and the allocation holding
// it, or an error for host memory.
func pointerRange(p unsafe.Pointer) (ordinal int, start, size uintptr, err error) {
	var ord C.int
	var st C.CUdeviceptr
	var n C.size_t
	err = check("cuPointerGetAttribute", C.mc_pointer_range(C.uintptr_t(uintptr(p)), &ord, &st, &n))
	return int(ord), uintptr(st), uintptr(n), err
}

func isCapturing(stream unsafe.Pointer) (bool, error) {
	var c C.int
	err := check("cuStreamIsCapturing", C.mc_is_capturing(C.uintptr_t(uintptr(stream)), &c))
	return c != 0, err
}

type module struct{ m C.CUmodule }

// function is a loaded kernel, the most threads a block of it may have, and
// its parameters' count and largest size (-1: the driver cannot say).
type function struct {
	f                    C.CUfunction
	maxThreads           int
	params, paramLargest int
}

// versions are the driver's CUDA version and NVRTC's, as strings for
// cache keys and messages.
func versions() (driver, nvrtc string) {
	var d, major, minor C.int
	C.mc_versions(&d, &major, &minor)
	return fmt.Sprint(int(d)), fmt.Sprintf("%d.%d", int(major), int(minor))
}

// nvrtcCompile compiles src with opts: a cubin when cubin is set (the
// options name an sm_XY architecture), else PTX.
func nvrtcCompile(src string, opts []string, cubin bool) ([]byte, error) {
	cs := C.CString(src)
	defer C.free(unsafe.Pointer(cs))
	copts := make([]*C.char, len(opts))
	for i, o := range opts {
		copts[i] = C.CString(o)
		defer C.free(unsafe.Pointer(copts[i]))
	}
	want := C.int(0)
	if cubin {
		want = 1
	}
	var image, log *C.char
	var size C.size_t
	res := C.mc_compile(cs, (**C.char)(unsafe.Pointer(&copts[0])), C.int(len(opts)), want, &image, &size, &log)
	defer C.free(unsafe.Pointer(log))
	defer C.free(unsafe.Pointer(image))
	if res != 0 {
		return nil, fmt.Errorf("NVRTC (%s) failed: %s", strings.Join(opts, " "), C.GoString(log))
	}
	return C.GoBytes(unsafe.Pointer(image), C.int(size)), nil
}

// load loads a cubin or PTX image into the current context.
func load(image []byte) (module, error) {
	var m module
	return m, check("cuModuleLoadData", C.mc_load(unsafe.Pointer(&image[0]), &m.m))
}

func (m module) function(name string) (function, error) {
	cn := C.CString(name)
	defer C.free(unsafe.Pointer(cn))
	var f function
	var mt, np, largest C.int
	err := check("cuModuleGetFunction "+name, C.mc_function(m.m, cn, &f.f, &mt, &np, &largest))
	f.maxThreads, f.params, f.paramLargest = int(mt)&^31, int(np), int(largest)
	return f, err
}

// resident is how many blocks of f with `threads` threads a multiprocessor
// holds at once.
func (f function) resident(threads int) (int, error) {
	var n C.int
	err := check("cuOccupancyMaxActiveBlocksPerMultiprocessor", C.mc_resident(f.f, C.int(threads), &n))
	return int(n), err
}

// launch runs f on stream within dev's context: entering it, opting f in
// to more than 48 KiB of dynamic shared memory, launching and leaving, all
// in one cgo call.
func (c *context) launch(dev int, f function, grid, block, shmem int, stream unsafe.Pointer, args []uint64, nparams int, cooperative bool) error {
	coop := C.int(0)
	if cooperative {
		coop = 1
	}
	return check("launching a kernel (context, cuFuncSetAttribute, cuLaunchKernel)", C.mc_launch_in(C.int(dev), c.primary,
		f.f, C.uint(grid), C.uint(block), C.uint(shmem), C.uintptr_t(uintptr(stream)), unsafe.Pointer(&args[0]), C.int(nparams), coop))
}

// Test support: plain device memory and copies, synchronous.

func memAlloc(n int) (unsafe.Pointer, error) {
	var p unsafe.Pointer
	err := check("cuMemAlloc", C.mc_alloc(C.size_t(max(n, 1)), &p))
	return p, err
}
func memFree(p unsafe.Pointer) error { return check("cuMemFree", C.mc_free(C.uintptr_t(uintptr(p)))) }
func copyHtoD(dst, src unsafe.Pointer, n int) error {
	return check("cuMemcpyHtoD", C.mc_htod(C.uintptr_t(uintptr(dst)), src, C.size_t(n)))
}
func copyDtoH(dst, src unsafe.Pointer, n int) error {
	return check("cuMemcpyDtoH", C.mc_dtoh(dst, C.uintptr_t(uintptr(src)), C.size_t(n)))
}
func synchronize() error { return check("cuCtxSynchronize", C.mc_sync()) }
