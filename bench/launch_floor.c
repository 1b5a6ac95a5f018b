// The host cost of a CUDA call, layer by layer, from C (no Python): the
// driver's own launch of an empty kernel, a call into the library that does
// nothing, mc_silu_fwd on an empty tensor (validation, no launch) and on a
// 4x64 float32 tensor. Run on a machine with an NVIDIA GPU:
//   cc -O2 -o build/launch_floor bench/launch_floor.c -ldl && build/launch_floor build/libmetalcore.so
// Each row: median over 51 batches of the mean of 200 calls, the GPU
// drained between batches. bench/python_host.py compiles and runs it for
// its CUDA layer table.
#define _POSIX_C_SOURCE 199309L  // clock_gettime under -std=c11
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "../include/metalcore.h"

typedef int CUresult;
typedef void* CUfunction;
static CUresult (*cuInit)(unsigned);
static CUresult (*cuDevicePrimaryCtxRetain)(void**, int);
static CUresult (*cuCtxSetCurrent)(void*);
static CUresult (*cuModuleLoadData)(void**, const void*);
static CUresult (*cuModuleGetFunction)(CUfunction*, void*, const char*);
static CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                  void*, void**, void**);
static CUresult (*cuMemAlloc)(uint64_t*, size_t);
static CUresult (*cuCtxSynchronize)(void);

static const char empty_ptx[] =
    ".version 7.0\n.target sm_52\n.address_size 64\n"
    ".visible .entry empty(.param .u32 n) { ret; }\n";

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int cmp(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b;
    return (x > y) - (x < y);
}

#define BATCHES 51
#define CALLS 200

// time_us is the median over batches of one call's mean time.
static double time_us(int (*call)(void)) {
    double t[BATCHES];
    for (int b = 0; b < BATCHES; b++) {
        cuCtxSynchronize();
        double start = now_us();
        for (int i = 0; i < CALLS; i++)
            if (call()) {
                fprintf(stderr, "call failed\n");
                exit(1);
            }
        t[b] = (now_us() - start) / CALLS;
    }
    qsort(t, BATCHES, sizeof t[0], cmp);
    return t[BATCHES / 2];
}

static CUfunction empty;
static int32_t (*mc_cpu_threads_p)(void);
static mc_status (*mc_silu_fwd_p)(const mc_tensor*, mc_tensor*, void*);
static mc_tensor x_empty, y_empty, x_small, y_small;

static int launch_empty(void) {
    uint32_t n = 0;
    void* params[] = {&n};
    return cuLaunchKernel(empty, 1, 1, 1, 32, 1, 1, 0, NULL, params, NULL);
}
static int library_noop(void) { return mc_cpu_threads_p() < 1; }
static int silu_empty(void) { return mc_silu_fwd_p(&x_empty, &y_empty, NULL); }
static int silu_small(void) { return mc_silu_fwd_p(&x_small, &y_small, NULL); }

#define SYM(lib, name)                                          \
    do {                                                        \
        *(void**)&name = dlsym(lib, #name);                     \
        if (!name) return fprintf(stderr, "no %s\n", #name), 1; \
    } while (0)

int main(int argc, char** argv) {
    if (argc != 2) return fprintf(stderr, "usage: %s libmetalcore.so\n", argv[0]), 2;
    void* cuda = dlopen("libcuda.so.1", RTLD_NOW);
    void* lib = dlopen(argv[1], RTLD_NOW);
    if (!cuda || !lib) return fprintf(stderr, "%s\n", dlerror()), 1;
    SYM(cuda, cuInit);
    SYM(cuda, cuDevicePrimaryCtxRetain);
    SYM(cuda, cuCtxSetCurrent);
    SYM(cuda, cuModuleLoadData);
    SYM(cuda, cuModuleGetFunction);
    SYM(cuda, cuLaunchKernel);
    SYM(cuda, cuCtxSynchronize);
    *(void**)&cuMemAlloc = dlsym(cuda, "cuMemAlloc_v2");
    *(void**)&mc_cpu_threads_p = dlsym(lib, "mc_cpu_threads");
    *(void**)&mc_silu_fwd_p = dlsym(lib, "mc_silu_fwd");
    if (!cuMemAlloc || !mc_cpu_threads_p || !mc_silu_fwd_p) return fprintf(stderr, "missing symbols\n"), 1;

    // the primary context made current, as a framework's runtime does
    void *ctx, *mod;
    uint64_t xp, yp;
    if (cuInit(0) || cuDevicePrimaryCtxRetain(&ctx, 0) || cuCtxSetCurrent(ctx) || cuModuleLoadData(&mod, empty_ptx) ||
        cuModuleGetFunction(&empty, mod, "empty") || cuMemAlloc(&xp, 1024) || cuMemAlloc(&yp, 1024))
        return fprintf(stderr, "CUDA setup failed\n"), 1;

    static int64_t shape_empty[] = {0}, shape_small[] = {4, 64};
    mc_tensor t = {0};
    t.device = (mc_device){MC_DEVICE_CUDA, 0};
    t.dtype = (mc_dtype){MC_DTYPE_FLOAT, 32, 1};
    x_empty = y_empty = x_small = y_small = t;
    x_empty.data = (void*)xp, y_empty.data = (void*)yp, x_empty.ndim = y_empty.ndim = 1;
    x_empty.shape = y_empty.shape = shape_empty;
    x_small.data = (void*)xp, y_small.data = (void*)yp, x_small.ndim = y_small.ndim = 2;
    x_small.shape = y_small.shape = shape_small;
    if (silu_small() || silu_empty())
        return fprintf(stderr, "mc_silu_fwd failed: %s\n", ((const char* (*)(void))dlsym(lib, "mc_last_error"))()), 1;

    printf("| call | us |\n|---|---:|\n");
    printf("| cuLaunchKernel, empty kernel | %.2f |\n", time_us(launch_empty));
    printf("| mc_cpu_threads (into the library and back) | %.2f |\n", time_us(library_noop));
    printf("| mc_silu_fwd, empty tensor (checks, no launch) | %.2f |\n", time_us(silu_empty));
    printf("| mc_silu_fwd, 4x64 float32 | %.2f |\n", time_us(silu_small));
    return 0;
}
