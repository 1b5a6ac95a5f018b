/* A small C host: dlopens libmetalcore.so, runs each op on CPU tensors it
 * owns, prints a few results and the bandwidth each op reached.
 *   cc -Iinclude examples/demo.c -ldl -lm && ./a.out build/libmetalcore.so */
#define _POSIX_C_SOURCE 199309L
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "metalcore.h"

#define ROWS 4096
#define COLS 4096

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static mc_tensor tensor(void* data, int ndim, int64_t* shape) {
    mc_tensor t;
    memset(&t, 0, sizeof t);
    t.data = data;
    t.device.device_type = MC_DEVICE_CPU;
    t.ndim = ndim;
    t.dtype.code = MC_DTYPE_FLOAT;
    t.dtype.bits = 32;
    t.dtype.lanes = 1;
    t.shape = shape;
    return t;
}

/* resolves a symbol or exits */
static void* sym(void* lib, const char* name) {
    void* p = dlsym(lib, name);
    if (!p) {
        fprintf(stderr, "missing %s\n", name);
        exit(1);
    }
    return p;
}

int main(int argc, char** argv) {
    const char* path = argc > 1 ? argv[1] : "build/libmetalcore.so";
    void* lib = dlopen(path, RTLD_NOW);
    if (!lib) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 1;
    }
    const char* (*version)(void) = (const char* (*)(void))sym(lib, "mc_version_string");
    const char* (*last_error)(void) = (const char* (*)(void))sym(lib, "mc_last_error");
    __typeof__(&mc_rmsnorm_fwd) rmsnorm = (__typeof__(&mc_rmsnorm_fwd))sym(lib, "mc_rmsnorm_fwd");
    __typeof__(&mc_fused_add_rmsnorm_fwd) fused = (__typeof__(&mc_fused_add_rmsnorm_fwd))sym(lib, "mc_fused_add_rmsnorm_fwd");
    __typeof__(&mc_layernorm_fwd) layernorm = (__typeof__(&mc_layernorm_fwd))sym(lib, "mc_layernorm_fwd");
    __typeof__(&mc_softmax_fwd) softmax = (__typeof__(&mc_softmax_fwd))sym(lib, "mc_softmax_fwd");
    __typeof__(&mc_gelu_fwd) gelu = (__typeof__(&mc_gelu_fwd))sym(lib, "mc_gelu_fwd");
    __typeof__(&mc_silu_fwd) silu = (__typeof__(&mc_silu_fwd))sym(lib, "mc_silu_fwd");
    printf("metalcore %s, CPU backend, float32 [%d, %d]\n", version(), ROWS, COLS);

    size_t n = (size_t)ROWS * COLS;
    float *x = malloc(n * 4), *y = malloc(n * 4), *res = malloc(n * 4), *w = malloc(COLS * 4);
    float* rstd = malloc(ROWS * 4);
    for (size_t i = 0; i < n; i++) x[i] = (float)((double)(i % 1000) / 250.0 - 2.0), res[i] = 0.5f;
    for (int i = 0; i < COLS; i++) w[i] = 1.0f + (float)i / COLS;
    int64_t shape[2] = {ROWS, COLS}, wshape[1] = {COLS}, rshape[1] = {ROWS};
    mc_tensor tx = tensor(x, 2, shape), ty = tensor(y, 2, shape), tres = tensor(res, 2, shape);
    mc_tensor tw = tensor(w, 1, wshape), tr = tensor(rstd, 1, rshape);

    const char* names[] = {"rmsnorm", "fused_add_rmsnorm", "layernorm", "softmax", "gelu(erf)", "silu"};
    double bytes[] = {2, 4, 2, 2, 2, 2}; /* tensor-sized reads + writes per op */
    for (int op = 0; op < 6; op++) {
        mc_status st = MC_OK;
        double best = 1e30;
        for (int rep = 0; rep < 5; rep++) {
            double t0 = now();
            switch (op) {
            case 0: st = rmsnorm(&tx, &tw, 1e-5f, &ty, &tr, NULL); break;
            case 1: st = fused(&tx, &tres, &tw, 1e-5f, &ty, &tres, &tr, NULL); break;
            case 2: st = layernorm(&tx, &tw, NULL, 1e-5f, &ty, NULL, &tr, NULL); break;
            case 3: st = softmax(&tx, &ty, NULL); break;
            case 4: st = gelu(&tx, MC_GELU_ERF, &ty, NULL); break;
            case 5: st = silu(&tx, &ty, NULL); break;
            }
            double dt = now() - t0;
            if (dt < best) best = dt;
            if (op == 1) memset(res, 0, n * 4); /* fused writes residual in place: reset */
        }
        if (st != MC_OK) {
            fprintf(stderr, "%s failed (%d): %s\n", names[op], st, last_error());
            return 1;
        }
        printf("  %-18s y[0..2] = % .5f % .5f % .5f   %6.2f ms  %6.1f GB/s\n", names[op], y[0], y[1], y[2],
               best * 1e3, bytes[op] * (double)n * 4 / best / 1e9);
    }
    mc_status st = softmax(&tx, NULL, NULL);
    printf("a bad call returns %d: %s\n", st, last_error());
    return 0;
}
