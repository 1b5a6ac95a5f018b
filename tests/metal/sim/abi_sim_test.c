/* The C ABI on simulated Metal tensors: a C host dlopens the library (a
 * metalsim build) and the Metal simulator, and calls the header's functions
 * on Metal tensors (device type 8: data an MTLBuffer, byte_offset into it)
 * and on CPU tensors holding the same values, every dtype and several
 * shapes, comparing the results. Each call sits between the host's own
 * dispatches on a concurrent encoder: copies of the inputs in and of the
 * outputs out. Whatever the simulator reports fails the test. Usage:
 * MC_METAL_SIM=SIMULATOR abi_sim_test LIBRARY (the library's Go runtime
 * reads the environment the process started with). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metalcore.h"
#include "../../c/check.h"

#define FUNCS(X)                                                                                                   \
    X(mc_last_error) X(mc_backend_available) X(mc_metal_prepare) X(mc_rmsnorm_fwd) X(mc_layernorm_fwd)             \
        X(mc_softmax_fwd) X(mc_softmax_bwd) X(mc_gelu_fwd) X(mc_silu_bwd) X(mc_glu_fwd) X(mc_cross_entropy)         \
            X(mc_rmsnorm_bwd_workspace_size) X(mc_rmsnorm_bwd) X(mc_adamw_step) X(mc_qr_workspace_size) X(mc_qr)
#define DECLARE(name) static __typeof__(&name) p_##name;
FUNCS(DECLARE)

/* the simulator's control functions */
static void* (*sim_new_buffer)(unsigned long);
static void* (*sim_contents)(void*);
static void* (*sim_begin)(int);
static void (*sim_finish)(void*);
static void (*sim_host_copy)(void*, void*, unsigned long, void*, unsigned long, unsigned long);
static void (*sim_library)(int);
static char* (*sim_errors)(void);
static void* enc;  /* the open encoder */

static uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}
static float from_bf16(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* a tensor twice: on the CPU, and in an MTLBuffer (16 bytes in, through
 * byte_offset) with a staging buffer the host writes and reads */
typedef struct {
    mc_tensor cpu, metal;
    int64_t shape[3];
    void *host, *buf, *staging;
    size_t bytes, n;
    int bits;
} pair;

static void make(pair* p, int bits, int ndim, const int64_t* shape, int code) {
    memset(p, 0, sizeof *p);
    p->n = 1;
    for (int i = 0; i < ndim; i++) p->shape[i] = shape[i], p->n *= (size_t)shape[i];
    p->bits = bits;
    p->bytes = p->n * (size_t)bits / 8;
    p->host = calloc(p->n + 8, 8);
    p->buf = sim_new_buffer(p->bytes + 16);
    p->staging = sim_new_buffer(p->bytes + 16);
    mc_tensor t = {p->host, {MC_DEVICE_CPU, 0}, ndim, {(uint8_t)code, (uint8_t)bits, 1}, p->shape, NULL, 0};
    p->cpu = t;
    t.data = p->buf, t.device.device_type = MC_DEVICE_METAL, t.byte_offset = 16;
    p->metal = t;
}
static float get(const pair* p, size_t i) {
    if (p->bits == 32) return ((float*)p->host)[i];
    return from_bf16(((uint16_t*)p->host)[i]);
}
static void set(pair* p, size_t i, float v) {
    if (p->bits == 32) ((float*)p->host)[i] = v;
    else ((uint16_t*)p->host)[i] = to_bf16(v);
}
/* host -> both copies (the Metal one by the host's copy dispatch) */
static void push(pair* p) {
    memcpy((char*)sim_contents(p->staging) + 16, p->host, p->bytes);
    sim_host_copy(enc, p->buf, 16, p->staging, 16, p->bytes);
}
static void fill(pair* p, unsigned seed, float scale) {
    for (size_t i = 0; i < p->n; i++) {
        seed = seed * 1103515245u + 12345u;
        set(p, i, scale * ((float)((seed >> 8) & 0xffff) / 32768.0f - 1.0f));
    }
    push(p);
}
static void flush(void) {
    sim_finish(enc);
    enc = sim_begin(1);
}
/* the Metal copy, read back after the host's copy dispatch out */
static void* pull(const pair* p) {
    sim_host_copy(enc, p->staging, 16, p->buf, 16, p->bytes);
    flush();
    return (char*)sim_contents(p->staging) + 16;
}
static void compare(const char* what, const pair* p, double tol) {
    const void* m = pull(p);
    int bad = 0;
    for (size_t i = 0; i < p->n; i++) {
        float want = get(p, i), got;
        if (p->bits == 32) got = ((const float*)m)[i];
        else got = from_bf16(((const uint16_t*)m)[i]);
        if (!(fabs((double)got - want) <= tol * (fabs(want) + 1)) && !(isnan(got) && isnan(want)) && bad++ < 3)
            fprintf(stderr, "  %s[%zu] = %g on Metal, %g on the CPU\n", what, i, got, want);
    }
    CHECK(bad == 0, "%s: %d of %zu values differ", what, bad, p->n);
}
static void drop(pair* p) {
    free(p->host);
}
static void sim_clean(const char* what) {
    flush();
    char* e = sim_errors();
    CHECK(!*e, "%s: the simulator reports:\n%s", what, e);
    free(e);
}

/* run: the call on the CPU copies, then on the Metal copies in a library call */
#define BOTH(what, call)                                                                         \
    do {                                                                                         \
        int metal = 0;                                                                           \
        void* e = NULL;                                                                          \
        CHECK((call) == MC_OK, "%s on the CPU: %s", what, p_mc_last_error());                    \
        metal = 1, e = enc;                                                                      \
        sim_library(1);                                                                          \
        mc_status st = (call);                                                                   \
        sim_library(0);                                                                          \
        CHECK(st == MC_OK, "%s on Metal: %s", what, p_mc_last_error());                          \
        (void)metal, (void)e;                                                                    \
    } while (0)
#define T(p) (metal ? &(p).metal : &(p).cpu)

int main(int argc, char** argv) {
    const char* sim_path = getenv("MC_METAL_SIM");
    if (argc < 2 || !sim_path) {
        fprintf(stderr, "usage: MC_METAL_SIM=SIMULATOR %s LIBRARY\n", argv[0]);
        return 2;
    }
    void* sim = dlopen(sim_path, RTLD_NOW | RTLD_GLOBAL);
    void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!sim || !lib) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 2;
    }
#define RESOLVE(name) p_##name = (__typeof__(p_##name))dlsym(lib, #name);
    FUNCS(RESOLVE)
    sim_new_buffer = dlsym(sim, "mcsim_new_buffer");
    sim_contents = dlsym(sim, "mcsim_contents");
    sim_begin = dlsym(sim, "mcsim_begin");
    sim_finish = dlsym(sim, "mcsim_finish");
    sim_host_copy = dlsym(sim, "mcsim_host_copy");
    sim_library = dlsym(sim, "mcsim_library");
    sim_errors = dlsym(sim, "mcsim_errors");
    CHECK(p_mc_backend_available(MC_DEVICE_METAL) == 1, "Metal is not available on the simulator");
    enc = sim_begin(1);
    sim_library(1);
    CHECK(p_mc_metal_prepare(enc) == MC_OK, "mc_metal_prepare: %s", p_mc_last_error());
    sim_library(0);
    sim_clean("prepare");

    const int64_t shapes[][2] = {{1, 1}, {3, 33}, {5, 1031}};
    for (int s = 0; s < 3; s++)
        for (int bits = 16; bits <= 32; bits += 16) {
            const int64_t* sh = shapes[s];
            char what[96];
            pair x, w, b, dy, y, y2, stat, stat2, dw, ws, tgt, loss;
            int code = bits == 16 ? MC_DTYPE_BFLOAT : MC_DTYPE_FLOAT;
            double tol = bits == 16 ? 1.0 / 64 : 1e-4;
            make(&x, bits, 2, sh, code), make(&w, bits, 1, sh + 1, code), make(&b, bits, 1, sh + 1, code);
            make(&dy, bits, 2, sh, code), make(&y, bits, 2, sh, code), make(&y2, bits, 2, sh, code);
            make(&stat, 32, 1, sh, MC_DTYPE_FLOAT), make(&stat2, 32, 1, sh, MC_DTYPE_FLOAT);
            make(&dw, bits, 1, sh + 1, code), make(&loss, 32, 1, sh, MC_DTYPE_FLOAT);
            make(&tgt, 64, 1, sh, 0);
            fill(&x, 1 + s, 2), fill(&w, 7, 1), fill(&b, 9, 1), fill(&dy, 11, 1);
            for (int64_t r = 0; r < sh[0]; r++) ((int64_t*)tgt.host)[r] = (r * 7) % sh[1];
            push(&tgt);
            snprintf(what, sizeof what, "%s [%lld %lld]", bits == 16 ? "bfloat16" : "float32", (long long)sh[0],
                     (long long)sh[1]);
            fprintf(stderr, "%s\n", what);

            BOTH("rmsnorm", p_mc_rmsnorm_fwd(T(x), T(w), 1e-6f, T(y), T(stat), e));
            compare("rmsnorm y", &y, tol), compare("rmsnorm rstd", &stat, 1e-5);
            BOTH("layernorm", p_mc_layernorm_fwd(T(x), NULL, T(b), 1e-5f, T(y), T(stat2), NULL, e));
            compare("layernorm y", &y, tol), compare("layernorm mean", &stat2, 1e-5);
            BOTH("softmax", p_mc_softmax_fwd(T(x), T(y), e));
            compare("softmax", &y, tol);
            push(&y);  /* both sides' softmax outputs, the CPU's values */
            BOTH("softmax backward", p_mc_softmax_bwd(T(dy), T(y), T(y2), e));
            compare("softmax backward", &y2, 4 * tol);
            BOTH("gelu", p_mc_gelu_fwd(T(x), MC_GELU_TANH, T(y), e));
            compare("gelu", &y, tol);
            BOTH("silu backward", p_mc_silu_bwd(T(dy), T(x), T(y), e));
            compare("silu backward", &y, tol);
            BOTH("swiglu", p_mc_glu_fwd(T(x), T(dy), 0, T(y), e));
            compare("swiglu", &y, tol);
            BOTH("cross-entropy", p_mc_cross_entropy(T(x), T(tgt), -100, 0.1f, NULL, T(loss), T(y), e));
            compare("cross-entropy loss", &loss, tol), compare("cross-entropy grad", &y, tol);
            /* rmsnorm backward: rstd from the forward, dweight through the workspace */
            BOTH("rmsnorm again", p_mc_rmsnorm_fwd(T(x), T(w), 1e-6f, T(y), T(stat), e));
            int64_t wsb = 0, wsc = 0;  /* each device's size; the larger made */
            CHECK(p_mc_rmsnorm_bwd_workspace_size(&x.metal, &wsb) == MC_OK, "workspace size");
            CHECK(p_mc_rmsnorm_bwd_workspace_size(&x.cpu, &wsc) == MC_OK, "workspace size");
            int64_t wsn[1] = {(wsb > wsc ? wsb : wsc) / 4 + 1};
            make(&ws, 32, 1, wsn, MC_DTYPE_FLOAT);
            BOTH("rmsnorm backward", p_mc_rmsnorm_bwd(T(dy), T(x), T(w), T(stat), T(y2), T(dw), (metal ? wsb : wsc) ? T(ws) : NULL, e));
            compare("rmsnorm backward dx", &y2, 4 * tol), compare("rmsnorm backward dweight", &dw, 4 * tol);
            sim_clean(what);
            pair* all[] = {&x, &w, &b, &dy, &y, &y2, &stat, &stat2, &dw, &ws, &tgt, &loss};
            for (size_t i = 0; i < sizeof all / sizeof *all; i++) drop(all[i]);
        }

    /* AdamW: 70 float32 tensors (two of Metal's 64-tensor tables) */
    enum { N = 70 };
    pair p[N], g[N], m[N], v[N];
    mc_tensor *cp[N], *cg[N], *cm[N], *cv[N], *mp[N], *mg[N], *mm[N], *mv[N];
    for (int i = 0; i < N; i++) {
        int64_t n[1] = {1 + (i * 37) % 300};
        make(&p[i], 32, 1, n, MC_DTYPE_FLOAT), make(&g[i], 32, 1, n, MC_DTYPE_FLOAT);
        make(&m[i], 32, 1, n, MC_DTYPE_FLOAT), make(&v[i], 32, 1, n, MC_DTYPE_FLOAT);
        fill(&p[i], 3 + i, 1), fill(&g[i], 5 + i, 1), fill(&m[i], 0, 0), fill(&v[i], 0, 0);
        cp[i] = &p[i].cpu, cg[i] = &g[i].cpu, cm[i] = &m[i].cpu, cv[i] = &v[i].cpu;
        mp[i] = &p[i].metal, mg[i] = &g[i].metal, mm[i] = &m[i].metal, mv[i] = &v[i].metal;
    }
    mc_adamw_config cfg = {1e-2, 0.9, 0.999, 1e-8, 0.1, 1, 0, 0};
    CHECK(p_mc_adamw_step(&cfg, N, cp, (const mc_tensor* const*)cg, cm, cv, NULL, NULL) == MC_OK, "adamw on the CPU");
    sim_library(1);
    CHECK(p_mc_adamw_step(&cfg, N, mp, (const mc_tensor* const*)mg, mm, mv, NULL, enc) == MC_OK, "adamw on Metal: %s",
          p_mc_last_error());
    sim_library(0);
    for (int i = 0; i < N; i++) compare("adamw param", &p[i], 1e-5), compare("adamw exp_avg_sq", &v[i], 1e-5);
    sim_clean("adamw");

    /* QR, reduced: the one-threadgroup kernel and the blocked path */
    const int64_t qs[][3] = {{5, 7, 4}, {1, 150, 140}};
    for (int c = 0; c < 2; c++) {
        pair a, q, r, ws;
        int64_t k = qs[c][1] < qs[c][2] ? qs[c][1] : qs[c][2], qsh[3] = {qs[c][0], qs[c][1], k},
                rsh[3] = {qs[c][0], k, qs[c][2]};
        make(&a, 32, 3, qs[c], MC_DTYPE_FLOAT), make(&q, 32, 3, qsh, MC_DTYPE_FLOAT), make(&r, 32, 3, rsh, MC_DTYPE_FLOAT);
        fill(&a, 17, 1);
        int64_t wsb = 0, wsc = 0;
        CHECK(p_mc_qr_workspace_size(&a.metal, MC_QR_REDUCED, &wsb) == MC_OK, "qr workspace");
        CHECK(p_mc_qr_workspace_size(&a.cpu, MC_QR_REDUCED, &wsc) == MC_OK, "qr workspace");
        int64_t wsn[1] = {(wsb > wsc ? wsb : wsc) / 4 + 1};
        make(&ws, 32, 1, wsn, MC_DTYPE_FLOAT);
        BOTH("qr", p_mc_qr(T(a), MC_QR_REDUCED, T(q), T(r), (metal ? wsb : wsc) ? T(ws) : NULL, e));
        compare("qr q", &q, 1e-4), compare("qr r", &r, 1e-4);
        sim_clean("qr");
    }
    if (failures) fprintf(stderr, "%d failures\n", failures);
    else fprintf(stderr, "the C ABI on simulated Metal: every check passed\n");
    return failures ? 1 : 0;
}
