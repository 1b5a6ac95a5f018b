/* A small C host: dlopens libmetalcore.so, runs every op (forward and
 * backward, AdamW, QR) on CPU tensors it owns, prints a few results and the
 * bandwidth (QR: the arithmetic rate) each op reached.
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

#define OPS(X)                                                                                               \
    X(mc_rmsnorm_fwd) X(mc_rmsnorm_bwd_workspace_size) X(mc_rmsnorm_bwd) X(mc_fused_add_rmsnorm_fwd)                \
    X(mc_layernorm_fwd) X(mc_layernorm_bwd_workspace_size) X(mc_layernorm_bwd) X(mc_softmax_fwd) X(mc_softmax_bwd) \
    X(mc_gelu_fwd) X(mc_gelu_bwd) X(mc_silu_fwd) X(mc_silu_bwd) X(mc_adamw_step) X(mc_qr_workspace_size) X(mc_qr)
#define DECLARE(name) static __typeof__(&name) p_##name;
OPS(DECLARE)

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
#define RESOLVE(name) p_##name = (__typeof__(&name))sym(lib, #name);
    OPS(RESOLVE)
    printf("metalcore %s, CPU backend, float32 [%d, %d]\n", version(), ROWS, COLS);

    size_t n = (size_t)ROWS * COLS;
    float *x = malloc(n * 4), *y = malloc(n * 4), *res = malloc(n * 4), *dy = malloc(n * 4), *dx = malloc(n * 4);
    float *w = malloc(COLS * 4), *b = malloc(COLS * 4), *dw = malloc(COLS * 4), *db = malloc(COLS * 4);
    float *mean = malloc(ROWS * 4), *rstd = malloc(ROWS * 4), *m1 = calloc(n, 4), *m2 = calloc(n, 4);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)((double)(i % 1000) / 250.0 - 2.0), res[i] = 0.5f, dy[i] = (float)(i % 7) / 7.0f - 0.5f;
    for (int i = 0; i < COLS; i++) w[i] = 1.0f + (float)i / COLS, b[i] = 0.1f;
    int64_t shape[2] = {ROWS, COLS}, wshape[1] = {COLS}, rshape[1] = {ROWS};
    mc_tensor tx = tensor(x, 2, shape), ty = tensor(y, 2, shape), tres = tensor(res, 2, shape);
    mc_tensor tdy = tensor(dy, 2, shape), tdx = tensor(dx, 2, shape), tm1 = tensor(m1, 2, shape), tm2 = tensor(m2, 2, shape);
    mc_tensor tw = tensor(w, 1, wshape), tb = tensor(b, 1, wshape), tdw = tensor(dw, 1, wshape), tdb = tensor(db, 1, wshape);
    mc_tensor tmean = tensor(mean, 1, rshape), tr = tensor(rstd, 1, rshape);

    /* the backward norms' workspace: the larger of the two sizes */
    int64_t ws_bytes = 0, ln_bytes = 0;
    p_mc_rmsnorm_bwd_workspace_size(&tx, &ws_bytes);
    p_mc_layernorm_bwd_workspace_size(&tx, &ln_bytes);
    if (ln_bytes > ws_bytes) ws_bytes = ln_bytes;
    int64_t wsshape[1] = {ws_bytes / 4};
    mc_tensor tws = tensor(malloc((size_t)ws_bytes), 1, wsshape);

    /* AdamW: the matrix as one parameter, dy its gradient, m1 and m2 the moments */
    mc_adamw_config cfg = {1e-3, 0.9, 0.999, 1e-8, 0.01, 1, 0, 0};
    mc_tensor *params[1] = {&ty}, *avgs[1] = {&tm1}, *sqs[1] = {&tm2};
    const mc_tensor* grads[1] = {&tdy};

    /* QR: 64 matrices of 256 x 256, reduced */
    enum { QB = 64, QM = 256, QN = 256 };
    size_t qn = (size_t)QB * QM * QN;
    float *qa = malloc(qn * 4), *qq = malloc(qn * 4), *qr = malloc(qn * 4);
    for (size_t i = 0; i < qn; i++) qa[i] = (float)((i * 2654435761u) % 1000) / 500.0f - 1.0f;
    int64_t qshape[3] = {QB, QM, QN};
    mc_tensor tqa = tensor(qa, 3, qshape), tqq = tensor(qq, 3, qshape), tqr = tensor(qr, 3, qshape);

    const char* names[] = {"rmsnorm",      "rmsnorm bwd", "fused_add_rmsnorm", "layernorm", "layernorm bwd",
                           "softmax",      "softmax bwd", "gelu(erf)",         "gelu bwd",  "silu",
                           "silu bwd",     "adamw step",  "qr 64x256x256"};
    /* tensor-sized reads + writes per op (AdamW: param rw, grad r, moments rw) */
    double bytes[] = {2, 3, 4, 2, 3, 2, 3, 2, 3, 2, 3, 7, 0};
    enum { NOPS = sizeof names / sizeof names[0] };
    for (int op = 0; op < NOPS; op++) {
        mc_status st = MC_OK;
        double best = 1e30;
        for (int rep = 0; rep < 5; rep++) {
            double t0 = now();
            switch (op) {
            case 0: st = p_mc_rmsnorm_fwd(&tx, &tw, 1e-5f, &ty, &tr, NULL); break;
            case 1: st = p_mc_rmsnorm_bwd(&tdy, &tx, &tw, &tr, &tdx, &tdw, &tws, NULL); break;
            case 2: st = p_mc_fused_add_rmsnorm_fwd(&tx, &tres, &tw, 1e-5f, &ty, &tres, &tr, NULL); break;
            case 3: st = p_mc_layernorm_fwd(&tx, &tw, &tb, 1e-5f, &ty, &tmean, &tr, NULL); break;
            case 4: st = p_mc_layernorm_bwd(&tdy, &tx, &tw, &tmean, &tr, &tdx, &tdw, &tdb, &tws, NULL); break;
            case 5: st = p_mc_softmax_fwd(&tx, &ty, NULL); break;
            case 6: st = p_mc_softmax_bwd(&tdy, &ty, &tdx, NULL); break;
            case 7: st = p_mc_gelu_fwd(&tx, MC_GELU_ERF, &ty, NULL); break;
            case 8: st = p_mc_gelu_bwd(&tdy, &tx, MC_GELU_ERF, &tdx, NULL); break;
            case 9: st = p_mc_silu_fwd(&tx, &ty, NULL); break;
            case 10: st = p_mc_silu_bwd(&tdy, &tx, &tdx, NULL); break;
            case 11: st = p_mc_adamw_step(&cfg, 1, params, grads, avgs, sqs, NULL, NULL); break;
            case 12: st = p_mc_qr(&tqa, MC_QR_REDUCED, &tqq, &tqr, NULL, NULL); break;
            }
            double dt = now() - t0;
            if (dt < best) best = dt;
            if (op == 2) memset(res, 0, n * 4); /* fused writes residual in place: reset */
        }
        if (st != MC_OK) {
            fprintf(stderr, "%s failed (%d): %s\n", names[op], st, last_error());
            return 1;
        }
        const float* out = op == 12 ? qr : (bytes[op] == 3 ? dx : y);
        printf("  %-18s out[0..2] = % .5f % .5f % .5f   %7.2f ms", names[op], out[0], out[1], out[2], best * 1e3);
        if (op == 12) /* Householder QR with Q formed: about 4mn^2 - 4n^3/3 flops a matrix */
            printf("  %6.1f GFLOP/s\n", QB * (4.0 * QM * QN * QN - 4.0 * QN * QN * QN / 3) / best / 1e9);
        else
            printf("  %6.1f GB/s\n", bytes[op] * (double)n * 4 / best / 1e9);
    }
    mc_status st = p_mc_softmax_fwd(&tx, NULL, NULL);
    printf("a bad call returns %d: %s\n", st, last_error());
    return 0;
}
