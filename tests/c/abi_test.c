/* Drives libmetalcore.so through include/metalcore.h the way a C host does:
 * dlopen, every op on CPU tensors in float32 and bfloat16 against a naive
 * double-precision reference written here, bad inputs, thread-local errors,
 * and a call from a forked child. Exit status 0 means every check passed. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "metalcore.h"
#include "check.h"

#define MC_VERSION_NUMBER (MC_VERSION_MAJOR * 10000 + MC_VERSION_MINOR * 100 + MC_VERSION_PATCH)

/* every function of the header, resolved with dlsym */
#define FUNCS(X)                                                                   \
    X(mc_version) X(mc_version_string) X(mc_backend_available) X(mc_last_error)    \
    X(mc_rmsnorm_fwd) X(mc_rmsnorm_bwd_workspace_size) X(mc_rmsnorm_bwd)            \
    X(mc_fused_add_rmsnorm_fwd) X(mc_layernorm_fwd) X(mc_layernorm_bwd_workspace_size) \
    X(mc_layernorm_bwd) X(mc_softmax_fwd) X(mc_softmax_bwd) X(mc_gelu_fwd)         \
    X(mc_gelu_bwd) X(mc_silu_fwd) X(mc_silu_bwd) X(mc_cuda_prepare) X(mc_metal_prepare) X(mc_adamw_step) X(mc_qr_workspace_size) X(mc_qr) \
    X(mc_cpu_threads) X(mc_set_cpu_threads) X(mc_cpu_isa) X(mc_adamw_step_scaled) X(mc_adamw_step_capturable) \
    X(mc_cross_entropy) X(mc_cross_entropy_fwd) X(mc_cross_entropy_bwd) X(mc_loss_grad_scale) X(mc_glu_fwd) X(mc_glu_bwd) X(mc_rope) X(mc_cholesky) X(mc_solve) X(mc_eigh) X(mc_svd)
#define DECLARE(name) static __typeof__(&name) p_##name;
FUNCS(DECLARE)

/* ---- tensors ------------------------------------------------------------ */

/* copied by value: shape and data live on the heap */
typedef struct {
    mc_tensor t;
    void* mem;
    int64_t n;
} tensor;

static const mc_dtype F32 = {MC_DTYPE_FLOAT, 32, 1}, BF16 = {MC_DTYPE_BFLOAT, 16, 1};

static tensor make(mc_dtype dt, int ndim, int64_t rows, int64_t cols) {
    tensor x;
    memset(&x, 0, sizeof x);
    int64_t* shape = malloc(2 * sizeof(int64_t));
    shape[0] = ndim == 1 ? cols : rows;
    shape[1] = cols;
    x.n = ndim == 1 ? cols : rows * cols;
    x.mem = malloc((size_t)(x.n ? x.n : 1) * 4);
    memset(x.mem, 0xff, (size_t)(x.n ? x.n : 1) * 4); /* NaN poison */
    x.t.data = x.mem;
    x.t.device.device_type = MC_DEVICE_CPU;
    x.t.ndim = ndim;
    x.t.dtype = dt;
    x.t.shape = shape;
    return x;
}

static double get(const tensor* x, int64_t i) {
    if (x->t.dtype.bits == 32) return ((float*)x->mem)[i];
    uint32_t u = (uint32_t)((uint16_t*)x->mem)[i] << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void set(tensor* x, int64_t i, double v) {
    float f = (float)v;
    if (x->t.dtype.bits == 32) {
        ((float*)x->mem)[i] = f;
        return;
    }
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fff + ((u >> 16) & 1); /* round to nearest even */
    ((uint16_t*)x->mem)[i] = (uint16_t)(u >> 16);
}

static void fill(tensor* x, double scale) {
    for (int64_t i = 0; i < x->n; i++) set(x, i, scale * ((double)rand() / RAND_MAX * 2 - 1));
}

static double tol(mc_dtype dt) { return dt.bits == 32 ? 2e-5 : 1.0 / 64; }

static void expect_close(const char* what, const tensor* got, const double* want, mc_dtype dt, double scale) {
    int bad = 0;
    for (int64_t i = 0; i < got->n; i++) {
        double g = get(got, i);
        if (!(fabs(g - want[i]) <= tol(dt) * (fabs(want[i]) + scale))) {
            if (bad++ < 3) CHECK(0, "%s (%d-bit)[%ld] = %g, want %g", what, dt.bits, (long)i, g, want[i]);
        }
    }
}

/* ---- naive references --------------------------------------------------- */

static double* rmsnorm_ref(const tensor* x, const tensor* w, int64_t rows, int64_t cols, double* rstd) {
    double* y = malloc(sizeof(double) * (size_t)(rows * cols));
    for (int64_t r = 0; r < rows; r++) {
        double ss = 0;
        for (int64_t c = 0; c < cols; c++) ss += get(x, r * cols + c) * get(x, r * cols + c);
        rstd[r] = 1 / sqrt(ss / (double)cols + 1e-5);
        for (int64_t c = 0; c < cols; c++) y[r * cols + c] = get(x, r * cols + c) * rstd[r] * get(w, c);
    }
    return y;
}

static double gelu_ref(double x, int tanh_form) {
    if (tanh_form) return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    return 0.5 * x * (1 + erf(x / sqrt(2)));
}

static double gelu_grad_ref(double x, int tanh_form) {
    double h = 1e-4; /* central difference in double: accurate to ~1e-8 */
    return (gelu_ref(x + h, tanh_form) - gelu_ref(x - h, tanh_form)) / (2 * h);
}

static double silu_ref(double x) { return x / (1 + exp(-x)); }

/* ---- op checks ----------------------------------------------------------- */

static void check_norms(mc_dtype dt, int64_t rows, int64_t cols) {
    tensor x = make(dt, 2, rows, cols), w = make(dt, 1, 0, cols), y = make(dt, 2, rows, cols);
    tensor rstd = make(F32, 1, 0, rows), res = make(dt, 2, rows, cols), ro = make(dt, 2, rows, cols);
    fill(&x, 2);
    fill(&w, 1);
    fill(&res, 1);
    double* r = malloc(sizeof(double) * (size_t)rows);
    double* want = rmsnorm_ref(&x, &w, rows, cols, r);
    CHECK(p_mc_rmsnorm_fwd(&x.t, &w.t, 1e-5f, &y.t, &rstd.t, NULL) == MC_OK, "rmsnorm_fwd: %s", p_mc_last_error());
    expect_close("rmsnorm y", &y, want, dt, 1);
    expect_close("rmsnorm rstd", &rstd, r, F32, 1);
    free(want);

    /* fused add: residual_out is rounded to dt, then normalized */
    CHECK(p_mc_fused_add_rmsnorm_fwd(&x.t, &res.t, &w.t, 1e-5f, &y.t, &ro.t, &rstd.t, NULL) == MC_OK, "fused: %s",
          p_mc_last_error());
    tensor sum = make(dt, 2, rows, cols);
    for (int64_t i = 0; i < sum.n; i++) set(&sum, i, (float)get(&x, i) + (float)get(&res, i));
    want = rmsnorm_ref(&sum, &w, rows, cols, r);
    for (int64_t i = 0; i < sum.n; i++) CHECK(get(&ro, i) == get(&sum, i), "residual_out[%ld]", (long)i);
    expect_close("fused y", &y, want, dt, 1);
    free(want);

    /* rmsnorm backward with dweight through the workspace */
    tensor dy = make(dt, 2, rows, cols), dx = make(dt, 2, rows, cols), dw = make(dt, 1, 0, cols);
    fill(&dy, 1);
    CHECK(p_mc_rmsnorm_fwd(&x.t, &w.t, 1e-5f, &y.t, &rstd.t, NULL) == MC_OK, "rmsnorm_fwd");
    int64_t bytes = -1;
    CHECK(p_mc_rmsnorm_bwd_workspace_size(&x.t, &bytes) == MC_OK && bytes >= 0, "workspace size");
    tensor ws = make((mc_dtype){1, 8, 1}, 1, 0, bytes); /* uint8 */
    CHECK(p_mc_rmsnorm_bwd(&dy.t, &x.t, &w.t, &rstd.t, &dx.t, &dw.t, &ws.t, NULL) == MC_OK, "rmsnorm_bwd: %s",
          p_mc_last_error());
    double* wdx = calloc((size_t)(rows * cols), sizeof(double));
    double* wdw = calloc((size_t)cols, sizeof(double));
    for (int64_t rr = 0; rr < rows; rr++) {
        double rs = get(&rstd, rr), dot = 0;
        for (int64_t c = 0; c < cols; c++) dot += get(&dy, rr * cols + c) * get(&w, c) * get(&x, rr * cols + c);
        for (int64_t c = 0; c < cols; c++) {
            double xv = get(&x, rr * cols + c), g = get(&dy, rr * cols + c) * get(&w, c);
            wdx[rr * cols + c] = rs * (g - xv * rs * rs * dot / (double)cols);
            wdw[c] += get(&dy, rr * cols + c) * xv * rs;
        }
    }
    expect_close("rmsnorm dx", &dx, wdx, dt, 1);
    expect_close("rmsnorm dweight", &dw, wdw, dt, 2 * sqrt((double)rows));

    /* layernorm forward + backward (dweight, dbias) */
    tensor b = make(dt, 1, 0, cols), mean = make(F32, 1, 0, rows), db = make(dt, 1, 0, cols);
    fill(&b, 1);
    CHECK(p_mc_layernorm_fwd(&x.t, &w.t, &b.t, 1e-5f, &y.t, &mean.t, &rstd.t, NULL) == MC_OK, "layernorm_fwd: %s",
          p_mc_last_error());
    double* wy = malloc(sizeof(double) * (size_t)(rows * cols));
    for (int64_t rr = 0; rr < rows; rr++) {
        double m = 0, v = 0;
        for (int64_t c = 0; c < cols; c++) m += get(&x, rr * cols + c);
        m /= (double)cols;
        for (int64_t c = 0; c < cols; c++) v += pow(get(&x, rr * cols + c) - m, 2);
        double rs = 1 / sqrt(v / (double)cols + 1e-5);
        for (int64_t c = 0; c < cols; c++) wy[rr * cols + c] = (get(&x, rr * cols + c) - m) * rs * get(&w, c) + get(&b, c);
    }
    expect_close("layernorm y", &y, wy, dt, 1);
    CHECK(p_mc_layernorm_bwd_workspace_size(&x.t, &bytes) == MC_OK, "ln workspace size");
    tensor ws2 = make(F32, 1, 0, bytes / 4);
    CHECK(p_mc_layernorm_bwd(&dy.t, &x.t, &w.t, &mean.t, &rstd.t, &dx.t, &dw.t, &db.t, &ws2.t, NULL) == MC_OK,
          "layernorm_bwd: %s", p_mc_last_error());
    memset(wdw, 0, sizeof(double) * (size_t)cols);
    double* wdb = calloc((size_t)cols, sizeof(double));
    for (int64_t rr = 0; rr < rows; rr++) {
        double m = get(&mean, rr), rs = get(&rstd, rr), sg = 0, sgx = 0;
        for (int64_t c = 0; c < cols; c++) {
            double g = get(&dy, rr * cols + c) * get(&w, c), xh = (get(&x, rr * cols + c) - m) * rs;
            sg += g;
            sgx += g * xh;
            wdw[c] += get(&dy, rr * cols + c) * xh;
            wdb[c] += get(&dy, rr * cols + c);
        }
        for (int64_t c = 0; c < cols; c++) {
            double g = get(&dy, rr * cols + c) * get(&w, c), xh = (get(&x, rr * cols + c) - m) * rs;
            wdx[rr * cols + c] = rs * (g - sg / (double)cols - xh * sgx / (double)cols);
        }
    }
    expect_close("layernorm dx", &dx, wdx, dt, 1);
    expect_close("layernorm dweight", &dw, wdw, dt, 2 * sqrt((double)rows));
    expect_close("layernorm dbias", &db, wdb, dt, 2 * sqrt((double)rows));
    free(r), free(wdx), free(wdw), free(wdb), free(wy);
    tensor* all[] = {&x, &w, &y, &rstd, &res, &ro, &sum, &dy, &dx, &dw, &ws, &b, &mean, &db, &ws2};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]->mem);
}

static void check_softmax_activations(mc_dtype dt, int64_t rows, int64_t cols) {
    tensor x = make(dt, 2, rows, cols), y = make(dt, 2, rows, cols), dy = make(dt, 2, rows, cols),
           dx = make(dt, 2, rows, cols);
    fill(&x, 4);
    fill(&dy, 1);
    double* want = malloc(sizeof(double) * (size_t)(rows * cols));
    CHECK(p_mc_softmax_fwd(&x.t, &y.t, NULL) == MC_OK, "softmax_fwd: %s", p_mc_last_error());
    for (int64_t r = 0; r < rows; r++) {
        double m = -INFINITY, s = 0;
        for (int64_t c = 0; c < cols; c++) m = fmax(m, get(&x, r * cols + c));
        for (int64_t c = 0; c < cols; c++) s += exp(get(&x, r * cols + c) - m);
        for (int64_t c = 0; c < cols; c++) want[r * cols + c] = exp(get(&x, r * cols + c) - m) / s;
    }
    expect_close("softmax y", &y, want, dt, 1.0 / (double)cols);
    CHECK(p_mc_softmax_bwd(&dy.t, &y.t, &dx.t, NULL) == MC_OK, "softmax_bwd: %s", p_mc_last_error());
    for (int64_t r = 0; r < rows; r++) {
        double d = 0;
        for (int64_t c = 0; c < cols; c++) d += get(&dy, r * cols + c) * get(&y, r * cols + c);
        for (int64_t c = 0; c < cols; c++) want[r * cols + c] = get(&y, r * cols + c) * (get(&dy, r * cols + c) - d);
    }
    expect_close("softmax dx", &dx, want, dt, 2.0 / (double)cols);

    for (int form = 0; form < 2; form++) {
        CHECK(p_mc_gelu_fwd(&x.t, form, &y.t, NULL) == MC_OK, "gelu_fwd: %s", p_mc_last_error());
        for (int64_t i = 0; i < x.n; i++) want[i] = gelu_ref(get(&x, i), form);
        expect_close(form ? "gelu tanh y" : "gelu erf y", &y, want, dt, 1);
        CHECK(p_mc_gelu_bwd(&dy.t, &x.t, form, &dx.t, NULL) == MC_OK, "gelu_bwd: %s", p_mc_last_error());
        for (int64_t i = 0; i < x.n; i++) want[i] = get(&dy, i) * gelu_grad_ref(get(&x, i), form);
        expect_close(form ? "gelu tanh dx" : "gelu erf dx", &dx, want, dt, 1);
    }
    CHECK(p_mc_silu_fwd(&x.t, &y.t, NULL) == MC_OK, "silu_fwd: %s", p_mc_last_error());
    for (int64_t i = 0; i < x.n; i++) want[i] = silu_ref(get(&x, i));
    expect_close("silu y", &y, want, dt, 1);
    CHECK(p_mc_silu_bwd(&dy.t, &x.t, &dx.t, NULL) == MC_OK, "silu_bwd: %s", p_mc_last_error());
    for (int64_t i = 0; i < x.n; i++) {
        double s = 1 / (1 + exp(-get(&x, i)));
        want[i] = get(&dy, i) * s * (1 + get(&x, i) * (1 - s));
    }
    expect_close("silu dx", &dx, want, dt, 1);
    /* SwiGLU: y = silu(x) * dy, and its gradients for dout = dx's values */
    tensor dg = make(dt, 2, rows, cols), du = make(dt, 2, rows, cols);
    CHECK(p_mc_glu_fwd(&x.t, &dy.t, MC_GLU_SWIGLU, &y.t, NULL) == MC_OK, "glu_fwd: %s", p_mc_last_error());
    for (int64_t i = 0; i < x.n; i++) want[i] = silu_ref(get(&x, i)) * get(&dy, i);
    expect_close("swiglu y", &y, want, dt, 1);
    CHECK(p_mc_glu_bwd(&dx.t, &x.t, &dy.t, MC_GLU_SWIGLU, &dg.t, &du.t, NULL) == MC_OK, "glu_bwd: %s",
          p_mc_last_error());
    for (int64_t i = 0; i < x.n; i++) {
        double s = 1 / (1 + exp(-get(&x, i)));
        want[i] = get(&dx, i) * get(&dy, i) * s * (1 + get(&x, i) * (1 - s));
    }
    expect_close("swiglu dgate", &dg, want, dt, 1);
    for (int64_t i = 0; i < x.n; i++) want[i] = get(&dx, i) * silu_ref(get(&x, i));
    expect_close("swiglu dup", &du, want, dt, 1);
    free(dg.mem), free(du.mem);
    if (cols % 2 == 0) { /* RoPE over x as [1, 1, rows, cols], cos = dy, sin = dx as [1, rows, cols] */
        int64_t xs[4] = {1, 1, rows, cols}, cs[3] = {1, rows, cols};
        mc_tensor x4 = x.t, c3 = dy.t, s3 = dx.t, y4 = y.t;
        x4.ndim = y4.ndim = 4, x4.shape = y4.shape = xs;
        c3.ndim = s3.ndim = 3, c3.shape = s3.shape = cs;
        CHECK(p_mc_rope(&x4, &c3, &s3, 0, &y4, NULL) == MC_OK, "rope: %s", p_mc_last_error());
        int64_t h = cols / 2;
        for (int64_t r = 0; r < rows; r++)
            for (int64_t j = 0; j < cols; j++) {
                int64_t i = r * cols + j, o = j < h ? i + h : i - h;
                want[i] = get(&x, i) * get(&dy, i) + (j < h ? -get(&x, o) : get(&x, o)) * get(&dx, i);
            }
        expect_close("rope y", &y, want, dt, 1);
    }
    free(want), free(x.mem), free(y.mem), free(dy.mem), free(dx.mem);
}

/* A failing call returns the status, names the function and the argument,
 * and leaves the output as it was. */
static void expect_failure(const char* what, mc_status got, mc_status want, const char* mention, const tensor* out,
                           const void* before) {
    CHECK(got == want, "%s: status %d, want %d (%s)", what, got, want, p_mc_last_error());
    CHECK(strstr(p_mc_last_error(), mention) != NULL, "%s: message \"%s\" lacks \"%s\"", what, p_mc_last_error(),
          mention);
    CHECK(memcmp(out->mem, before, (size_t)out->n * 4) == 0, "%s: output changed", what);
}

/* Cross-entropy rows with an ignored row and label smoothing, the loss and
 * the gradient against a double reference; a target past V is refused with
 * nothing written. */
static void check_cross_entropy(mc_dtype dt, int64_t rows, int64_t cols) {
    tensor x = make(dt, 2, rows, cols), g = make(dt, 2, rows, cols), loss = make(F32, 1, 1, rows);
    fill(&x, 3);
    int64_t* targets = malloc((size_t)rows * sizeof(int64_t));
    int64_t tshape[1] = {rows};
    mc_tensor target = {targets, {MC_DEVICE_CPU, 0}, 1, {MC_DTYPE_INT, 64, 1}, tshape, NULL, 0};
    for (int64_t r = 0; r < rows; r++) targets[r] = r % 4 == 1 ? -100 : (r * 7) % cols;
    const double s = 0.1;
    CHECK(p_mc_cross_entropy(&x.t, &target, -100, (float)s, NULL, &loss.t, &g.t, NULL) == MC_OK, "cross_entropy: %s",
          p_mc_last_error());
    double* want = malloc(sizeof(double) * (size_t)(rows * cols));
    double* want_loss = malloc(sizeof(double) * (size_t)rows);
    for (int64_t r = 0; r < rows; r++) {
        double m = -INFINITY, sum = 0, e = 0;
        for (int64_t c = 0; c < cols; c++) m = fmax(m, get(&x, r * cols + c)), sum += get(&x, r * cols + c);
        for (int64_t c = 0; c < cols; c++) e += exp(get(&x, r * cols + c) - m);
        double lse = m + log(e);
        int64_t t = targets[r];
        want_loss[r] = t < 0 ? 0 : (1 - s) * (lse - get(&x, r * cols + t)) + s * (lse - sum / (double)cols);
        for (int64_t c = 0; c < cols; c++)
            want[r * cols + c] = t < 0 ? 0 : exp(get(&x, r * cols + c) - lse) - s / (double)cols - (c == t ? 1 - s : 0);
    }
    expect_close("cross_entropy loss", &loss, want_loss, F32, 1);
    expect_close("cross_entropy dlogits", &g, want, dt, 1.0 / (double)cols);
    /* the split: loss and lse, then the gradient from lse, outputs poisoned first */
    tensor lse = make(F32, 1, 1, rows);
    memset(loss.mem, 0xff, (size_t)loss.n * 4), memset(g.mem, 0xff, (size_t)g.n * 4);
    CHECK(p_mc_cross_entropy_fwd(&x.t, &target, -100, (float)s, &loss.t, &lse.t, NULL) == MC_OK,
          "cross_entropy_fwd: %s", p_mc_last_error());
    CHECK(p_mc_cross_entropy_bwd(&x.t, &target, &lse.t, -100, (float)s, NULL, &g.t, NULL) == MC_OK,
          "cross_entropy_bwd: %s", p_mc_last_error());
    expect_close("cross_entropy_fwd loss", &loss, want_loss, F32, 1);
    expect_close("cross_entropy_bwd dlogits", &g, want, dt, 1.0 / (double)cols);
    CHECK(p_mc_cross_entropy_bwd(&x.t, &target, NULL, -100, (float)s, NULL, &g.t, NULL) == MC_ERR_INVALID_ARGUMENT,
          "cross_entropy_bwd without lse: %s", p_mc_last_error());
    /* the gradient scaled in place by a device scalar: by 1, then by -2 */
    tensor by = make(F32, 1, 1, 1);
    for (int k = 0; k < 2; k++) {
        float f = k ? -2.f : 1.f;
        memcpy(by.mem, &f, 4);
        CHECK(p_mc_loss_grad_scale(&g.t, &by.t, NULL) == MC_OK, "loss_grad_scale: %s", p_mc_last_error());
        if (k)
            for (int64_t i = 0; i < rows * cols; i++) want[i] *= -2;
        expect_close("loss_grad_scale dlogits", &g, want, dt, 2.0 / (double)cols);
    }
    free(by.mem), free(lse.mem);
    targets[rows - 1] = cols;
    void* before = malloc((size_t)loss.n * 4);
    memcpy(before, loss.mem, (size_t)loss.n * 4);
    expect_failure("cross_entropy target past V", p_mc_cross_entropy(&x.t, &target, -100, 0, NULL, &loss.t, NULL, NULL),
                   MC_ERR_INVALID_ARGUMENT, "target", &loss, before);
    free(before), free(want), free(want_loss), free(targets), free(x.mem), free(g.mem), free(loss.mem);
}

/* One AdamW step over three tensors (one empty) against a double reference,
 * and an all-or-nothing refusal. */
static void check_adamw(void) {
    int64_t sizes[3] = {5, 0, 1001};
    tensor p[3], g[3], m[3], v[3];
    mc_tensor *pp[3], *gp[3], *mp[3], *vp[3];
    double* want[3];
    void* start[3]; /* the params before the step */
    mc_adamw_config cfg = {1e-2, 0.9, 0.999, 1e-8, 0.1, 1, 0, 0};
    for (int i = 0; i < 3; i++) {
        p[i] = make(F32, 1, 0, sizes[i]), g[i] = make(F32, 1, 0, sizes[i]);
        m[i] = make(F32, 1, 0, sizes[i]), v[i] = make(F32, 1, 0, sizes[i]);
        fill(&p[i], 1), fill(&g[i], 1);
        start[i] = malloc((size_t)(sizes[i] + 1) * 4);
        memcpy(start[i], p[i].mem, (size_t)sizes[i] * 4);
        want[i] = malloc(sizeof(double) * (size_t)(sizes[i] + 1));
        for (int64_t j = 0; j < sizes[i]; j++) {
            set(&m[i], j, 0), set(&v[i], j, 0);
            double gj = get(&g[i], j), mm = 0.1 * gj, vv = 0.001 * gj * gj;
            double pj = get(&p[i], j) * (1 - 1e-2 * 0.1);
            want[i][j] = pj - 1e-2 / (1 - 0.9) * mm / (sqrt(vv) / sqrt(1 - 0.999) + 1e-8);
        }
        pp[i] = &p[i].t, gp[i] = &g[i].t, mp[i] = &m[i].t, vp[i] = &v[i].t;
    }
    void* before = malloc((size_t)p[2].n * 4);
    memcpy(before, p[2].mem, (size_t)p[2].n * 4);
    mp[1] = &v[1].t; /* state aliasing another state: refused, nothing written */
    mp[0] = &v[0].t;
    expect_failure("adamw aliasing", p_mc_adamw_step(&cfg, 3, pp, (const mc_tensor* const*)gp, mp, vp, NULL, NULL),
                   MC_ERR_INVALID_ARGUMENT, "overlaps", &p[2], before);
    mp[0] = &m[0].t, mp[1] = &m[1].t;
    CHECK(p_mc_adamw_step(&cfg, 3, pp, (const mc_tensor* const*)gp, mp, vp, NULL, NULL) == MC_OK, "adamw: %s",
          p_mc_last_error());
    for (int i = 0; i < 3; i++) expect_close("adamw param", &p[i], want[i], F32, 1);
    /* scaled: found_inf set writes nothing; gradients 8x with a scale of 8
     * step as the first call's did from the same state */
    tensor scale = make(F32, 1, 0, 1), inf = make(F32, 1, 0, 1);
    set(&scale, 0, 8);
    set(&inf, 0, 1);
    memcpy(before, p[2].mem, (size_t)p[2].n * 4);
    CHECK(p_mc_adamw_step_scaled(&cfg, 3, pp, (const mc_tensor* const*)gp, mp, vp, NULL, &scale.t, &inf.t, NULL) ==
              MC_OK, "scaled adamw: %s", p_mc_last_error());
    CHECK(!memcmp(before, p[2].mem, (size_t)p[2].n * 4), "found_inf set: the params changed");
    set(&inf, 0, 0);
    for (int i = 0; i < 3; i++) {
        memcpy(p[i].mem, start[i], (size_t)sizes[i] * 4);
        for (int64_t j = 0; j < sizes[i]; j++) set(&g[i], j, 8 * get(&g[i], j)), set(&m[i], j, 0), set(&v[i], j, 0);
    }
    CHECK(p_mc_adamw_step_scaled(&cfg, 3, pp, (const mc_tensor* const*)gp, mp, vp, NULL, &scale.t, &inf.t, NULL) ==
              MC_OK, "scaled adamw: %s", p_mc_last_error());
    for (int i = 0; i < 3; i++) expect_close("scaled adamw param", &p[i], want[i], F32, 1);
    /* capturable: the step numbers (and lr) from tensors; the config's step
     * and lr are not used where they are given */
    tensor steps = make(F32, 1, 0, 3), lr = make(F32, 1, 0, 1);
    for (int i = 0; i < 3; i++) {
        set(&steps, i, (float)cfg.step);
        memcpy(p[i].mem, start[i], (size_t)sizes[i] * 4);
        for (int64_t j = 0; j < sizes[i]; j++) set(&m[i], j, 0), set(&v[i], j, 0);
    }
    set(&lr, 0, (float)cfg.lr);
    mc_adamw_config wrong = cfg;
    wrong.step = 1000, wrong.lr = 0.5;
    CHECK(p_mc_adamw_step_capturable(&wrong, 3, pp, (const mc_tensor* const*)gp, mp, vp, NULL, &scale.t, &inf.t,
                                     &steps.t, &lr.t, NULL) == MC_OK,
          "capturable adamw: %s", p_mc_last_error());
    for (int i = 0; i < 3; i++) expect_close("capturable adamw param", &p[i], want[i], F32, 1);
    memcpy(before, p[2].mem, (size_t)p[2].n * 4);
    expect_failure("capturable adamw without steps",
                   p_mc_adamw_step_capturable(&cfg, 3, pp, (const mc_tensor* const*)gp, mp, vp, NULL, NULL, NULL, NULL,
                                              NULL, NULL),
                   MC_ERR_INVALID_ARGUMENT, "steps is NULL", &p[2], before);
    expect_failure("capturable adamw, one step for three tensors",
                   p_mc_adamw_step_capturable(&cfg, 3, pp, (const mc_tensor* const*)gp, mp, vp, NULL, NULL, NULL,
                                              &lr.t, NULL, NULL),
                   MC_ERR_INVALID_ARGUMENT, "steps has 1 elements, must have 3", &p[2], before);
    for (int i = 0; i < 3; i++) free(want[i]), free(start[i]), free(p[i].mem), free(g[i].mem), free(m[i].mem), free(v[i].mem);
    free(scale.mem), free(inf.mem), free(steps.mem), free(lr.mem), free(before);
}

/* QR of a 5x3 matrix: q r reproduces a, q's columns orthonormal. */
static void check_qr(void) {
    tensor a = make(F32, 2, 5, 3), q = make(F32, 2, 5, 3), r = make(F32, 2, 3, 3);
    fill(&a, 1);
    int64_t bytes = -1;
    CHECK(p_mc_qr_workspace_size(&a.t, MC_QR_REDUCED, &bytes) == MC_OK && bytes == 0, "qr workspace size");
    CHECK(p_mc_qr(&a.t, MC_QR_REDUCED, &q.t, &r.t, NULL, NULL) == MC_OK, "qr: %s", p_mc_last_error());
    double err = 0, orth = 0;
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 3; j++) {
            double s = 0;
            for (int l = 0; l < 3; l++) s += get(&q, i * 3 + l) * get(&r, l * 3 + j);
            err = fmax(err, fabs(s - get(&a, i * 3 + j)));
        }
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++) {
            double s = 0;
            for (int l = 0; l < 5; l++) s += get(&q, l * 3 + i) * get(&q, l * 3 + j);
            orth = fmax(orth, fabs(s - (i == j)));
        }
    CHECK(err < 1e-5 && orth < 1e-5, "qr: reconstruction %g, orthogonality %g", err, orth);
    CHECK(get(&r, 3) == 0 && get(&r, 6) == 0 && get(&r, 7) == 0, "qr: r not upper triangular");
    CHECK(p_mc_qr(&a.t, MC_QR_R, &q.t, &r.t, NULL, NULL) == MC_ERR_INVALID_ARGUMENT, "qr: q given in r mode");
    free(a.mem), free(q.mem), free(r.mem);
}

/* Cholesky of two 4 x 4 matrices, the second not positive-definite from
 * order 3: the first's factor against a double reference, the other
 * triangle zero, and each info; then int64 info refused. */
static void check_cholesky(void) {
    enum { N = 4 };
    tensor a = make(F32, 2, 2 * N, N), l = make(F32, 2, 2 * N, N), m = make(F32, 2, N, N);
    int64_t shape3[3] = {2, N, N}, ishape[1] = {2};
    free(a.t.shape), free(l.t.shape);
    a.t.ndim = l.t.ndim = 3, a.t.shape = l.t.shape = shape3;
    fill(&m, 1);
    for (int b = 0; b < 2; b++)
        for (int i = 0; i < N; i++)
            for (int j = 0; j < N; j++) {
                double s = i == j;
                for (int k = 0; k < N; k++) s += get(&m, i * N + k) * get(&m, j * N + k) / N;
                set(&a, b * N * N + i * N + j, s);
            }
    set(&a, N * N + 2 * N + 2, -5);
    int32_t info[2] = {-1, -1};
    mc_tensor it = {info, {MC_DEVICE_CPU, 0}, 1, {MC_DTYPE_INT, 32, 1}, ishape, NULL, 0};
    CHECK(p_mc_cholesky(&a.t, 0, &l.t, &it, NULL) == MC_OK, "cholesky: %s", p_mc_last_error());
    CHECK(info[0] == 0 && info[1] == 3, "cholesky: info %d %d, want 0 3", info[0], info[1]);
    double want[N * N] = {0};
    for (int j = 0; j < N; j++) {
        double d = get(&a, j * N + j);
        for (int k = 0; k < j; k++) d -= want[j * N + k] * want[j * N + k];
        want[j * N + j] = sqrt(d);
        for (int i = j + 1; i < N; i++) {
            double s = get(&a, i * N + j);
            for (int k = 0; k < j; k++) s -= want[i * N + k] * want[j * N + k];
            want[i * N + j] = s / want[j * N + j];
        }
    }
    for (int e = 0; e < N * N; e++)
        CHECK(fabs(get(&l, e) - want[e]) <= 1e-5 * (fabs(want[e]) + 1), "cholesky l[%d] = %g, want %g", e,
              get(&l, e), want[e]);
    it.dtype.bits = 64;
    CHECK(p_mc_cholesky(&a.t, 0, &l.t, &it, NULL) == MC_ERR_UNSUPPORTED_DTYPE, "cholesky: int64 info: %s",
          p_mc_last_error());
    a.t.shape = l.t.shape = NULL;
    free(a.mem), free(l.mem), free(m.mem), free(m.t.shape);
}

/* The eigenvalues (1, 3, 5) and eigenvectors of a 3 x 3 matrix, read from
 * its lower triangle (the upper one NaN), beside one holding a NaN (info 1,
 * NaN eigenvalues); eigenvalues alone; then w of another dtype refused. */
static void check_eigh(void) {
    enum { N = 3 };
    static const double m[N * N] = {2, NAN, NAN, 1, 2, NAN, 0, 0, 5};
    tensor a = make(F32, 2, 2 * N, N), v = make(F32, 2, 2 * N, N), w = make(F32, 2, 2, N);
    int64_t shape3[3] = {2, N, N}, ishape[1] = {2};
    free(a.t.shape), free(v.t.shape);
    a.t.ndim = v.t.ndim = 3, a.t.shape = v.t.shape = shape3;
    for (int b = 0; b < 2; b++)
        for (int e = 0; e < N * N; e++) set(&a, b * N * N + e, m[e]);
    set(&a, N * N + 4, NAN);
    int32_t info[2] = {-1, -1};
    mc_tensor it = {info, {MC_DEVICE_CPU, 0}, 1, {MC_DTYPE_INT, 32, 1}, ishape, NULL, 0};
    for (int vectors = 1; vectors >= 0; vectors--) {
        CHECK(p_mc_eigh(&a.t, 0, &w.t, vectors ? &v.t : NULL, &it, NULL) == MC_OK, "eigh: %s", p_mc_last_error());
        CHECK(info[0] == 0 && info[1] == 1, "eigh: info %d %d, want 0 1", info[0], info[1]);
        for (int i = 0; i < N; i++) {
            CHECK(fabs(get(&w, i) - (2 * i + 1)) <= 1e-5, "eigh w[%d] = %g, want %d", i, get(&w, i), 2 * i + 1);
            CHECK(isnan(get(&w, N + i)), "eigh: the NaN matrix's w[%d] = %g", i, get(&w, N + i));
        }
        for (int k = 0; vectors && k < N; k++) /* A v_k = w_k v_k, |v_k| = 1 */
            for (int i = 0; i < N; i++) {
                double av = 0, norm = 0;
                for (int j = 0; j < N; j++) {
                    double aij = i >= j ? m[i * N + j] : m[j * N + i];
                    av += aij * get(&v, j * N + k), norm += get(&v, j * N + k) * get(&v, j * N + k);
                }
                CHECK(fabs(av - get(&w, k) * get(&v, i * N + k)) <= 1e-5 && fabs(norm - 1) <= 1e-5,
                      "eigh: eigenvector %d row %d", k, i);
            }
    }
    w.t.dtype.bits = 16;
    CHECK(p_mc_eigh(&a.t, 0, &w.t, &v.t, &it, NULL) == MC_ERR_UNSUPPORTED_DTYPE, "eigh: float16 w: %s",
          p_mc_last_error());
    a.t.shape = v.t.shape = NULL;
    free(a.mem), free(v.mem), free(w.mem), free(w.t.shape);
}

/* The thin SVD of a 3 x 2 matrix (singular values 5 and 2: A = U diag(s)
 * Vh with orthonormal U's columns and Vh's rows) beside one holding a NaN
 * (info 1, NaN values); the values alone; then u without vh refused. */
static void check_svd(void) {
    enum { M = 3, N = 2 };
    static const double m[M * N] = {3, 4, 0, 0, 2, 0};
    tensor a = make(F32, 2, 2 * M, N), u = make(F32, 2, 2 * M, N), s = make(F32, 2, 2, N), vh = make(F32, 2, 2 * N, N);
    int64_t ashape[3] = {2, M, N}, vshape[3] = {2, N, N}, ishape[1] = {2};
    free(a.t.shape), free(u.t.shape), free(vh.t.shape);
    a.t.ndim = u.t.ndim = vh.t.ndim = 3, a.t.shape = u.t.shape = ashape, vh.t.shape = vshape;
    for (int b = 0; b < 2; b++)
        for (int e = 0; e < M * N; e++) set(&a, b * M * N + e, m[e]);
    set(&a, M * N + 1, NAN);
    double want[N];
    { /* the singular values of m from its 2 x 2 Gram matrix */
        double g00 = 3 * 3 + 2 * 2, g11 = 4 * 4, g01 = 3 * 4, h = sqrt((g00 - g11) * (g00 - g11) / 4 + g01 * g01);
        want[0] = sqrt((g00 + g11) / 2 + h), want[1] = sqrt((g00 + g11) / 2 - h);
    }
    int32_t info[2] = {-1, -1};
    mc_tensor it = {info, {MC_DEVICE_CPU, 0}, 1, {MC_DTYPE_INT, 32, 1}, ishape, NULL, 0};
    for (int vectors = 1; vectors >= 0; vectors--) {
        CHECK(p_mc_svd(&a.t, vectors ? &u.t : NULL, &s.t, vectors ? &vh.t : NULL, &it, NULL) == MC_OK, "svd: %s",
              p_mc_last_error());
        CHECK(info[0] == 0 && info[1] == 1, "svd: info %d %d, want 0 1", info[0], info[1]);
        for (int i = 0; i < N; i++) {
            CHECK(fabs(get(&s, i) - want[i]) <= 1e-5 * want[0], "svd s[%d] = %g, want %g", i, get(&s, i), want[i]);
            CHECK(isnan(get(&s, N + i)), "svd: the NaN matrix's s[%d] = %g", i, get(&s, N + i));
        }
        for (int i = 0; vectors && i < M; i++) /* U diag(s) Vh = A */
            for (int j = 0; j < N; j++) {
                double x = 0;
                for (int k = 0; k < N; k++) x += get(&u, i * N + k) * get(&s, k) * get(&vh, k * N + j);
                CHECK(fabs(x - m[i * N + j]) <= 1e-5 * want[0], "svd: (U diag(s) Vh)[%d][%d] = %g, want %g", i, j, x,
                      m[i * N + j]);
            }
        for (int p = 0; vectors && p < N; p++) /* U's columns and Vh's rows orthonormal */
            for (int q = 0; q < N; q++) {
                double uu = 0, vv = 0;
                for (int i = 0; i < M; i++) uu += get(&u, i * N + p) * get(&u, i * N + q);
                for (int j = 0; j < N; j++) vv += get(&vh, p * N + j) * get(&vh, q * N + j);
                CHECK(fabs(uu - (p == q)) <= 1e-5 && fabs(vv - (p == q)) <= 1e-5, "svd: orthonormality (%d, %d)", p, q);
            }
    }
    CHECK(p_mc_svd(&a.t, &u.t, &s.t, NULL, &it, NULL) == MC_ERR_INVALID_ARGUMENT, "svd: u without vh: %s",
          p_mc_last_error());
    a.t.shape = u.t.shape = vh.t.shape = NULL;
    free(a.mem), free(u.mem), free(s.mem), free(vh.mem), free(s.t.shape);
}

/* Two 5 x 5 systems with two right-hand sides: the first regular (A X
 * reproduces B), the second singular (a zero column: info 1, x NaN); a
 * b of another batch is refused. */
static void check_solve(void) {
    enum { N = 5, K = 2 };
    int64_t ashape[3] = {2, N, N}, bshape[3] = {2, N, K}, ishape[1] = {2};
    tensor a = make(F32, 2, 2 * N, N), b = make(F32, 2, 2 * N, K), x = make(F32, 2, 2 * N, K);
    free(a.t.shape), free(b.t.shape), free(x.t.shape);
    a.t.ndim = b.t.ndim = x.t.ndim = 3, a.t.shape = ashape, b.t.shape = x.t.shape = bshape;
    fill(&a, 1), fill(&b, 1);
    for (int i = 0; i < N; i++) set(&a, i * N + i, get(&a, i * N + i) + 4), set(&a, N * N + i * N, 0);
    int32_t info[2] = {-1, -1};
    mc_tensor it = {info, {MC_DEVICE_CPU, 0}, 1, {MC_DTYPE_INT, 32, 1}, ishape, NULL, 0};
    CHECK(p_mc_solve(&a.t, &b.t, &x.t, &it, NULL) == MC_OK, "solve: %s", p_mc_last_error());
    CHECK(info[0] == 0 && info[1] == 1, "solve: info %d %d, want 0 1", info[0], info[1]);
    for (int i = 0; i < N; i++)
        for (int c = 0; c < K; c++) {
            double s = 0;
            for (int j = 0; j < N; j++) s += get(&a, i * N + j) * get(&x, j * K + c);
            CHECK(fabs(s - get(&b, i * K + c)) <= 1e-5, "solve: (A x)[%d][%d] = %g, want %g", i, c, s, get(&b, i * K + c));
            CHECK(isnan(get(&x, N * K + i * K + c)), "solve: singular x[%d][%d] = %g, want NaN", i, c,
                  get(&x, N * K + i * K + c));
        }
    bshape[0] = 1;
    CHECK(p_mc_solve(&a.t, &b.t, &x.t, &it, NULL) == MC_ERR_INVALID_ARGUMENT, "solve: b of another batch: %s",
          p_mc_last_error());
    a.t.shape = b.t.shape = x.t.shape = NULL;
    free(a.mem), free(b.mem), free(x.mem);
}

static void check_bad_inputs(void) {
    tensor x = make(F32, 2, 4, 8), w = make(F32, 1, 0, 8), y = make(F32, 2, 4, 8);
    fill(&x, 1);
    fill(&w, 1);
    void* before = malloc((size_t)y.n * 4);
    memcpy(before, y.mem, (size_t)y.n * 4);
    expect_failure("NULL x", p_mc_rmsnorm_fwd(NULL, &w.t, 1e-5f, &y.t, NULL, NULL), MC_ERR_INVALID_ARGUMENT,
                   "mc_rmsnorm_fwd: x", &y, before);
    tensor w7 = make(F32, 1, 0, 7);
    expect_failure("short weight", p_mc_rmsnorm_fwd(&x.t, &w7.t, 1e-5f, &y.t, NULL, NULL), MC_ERR_INVALID_ARGUMENT,
                   "weight", &y, before);
    x.t.device.device_type = MC_DEVICE_CUDA; /* unavailable backend, or CPU and CUDA mixed */
    expect_failure("CUDA x", p_mc_softmax_fwd(&x.t, &y.t, NULL),
                   p_mc_backend_available(MC_DEVICE_CUDA) ? MC_ERR_INVALID_ARGUMENT : MC_ERR_UNSUPPORTED_DEVICE, "CUDA",
                   &y, before);
    x.t.device.device_type = MC_DEVICE_METAL; /* off macOS: unavailable, saying why */
    if (!p_mc_backend_available(MC_DEVICE_METAL)) {
        int encoder = 0;
        y.t.device.device_type = MC_DEVICE_METAL;
        expect_failure("Metal x", p_mc_rmsnorm_fwd(&x.t, NULL, 1e-5f, &y.t, NULL, &encoder), MC_ERR_UNSUPPORTED_DEVICE,
                       "macOS", &y, before);
        y.t.device.device_type = MC_DEVICE_CPU;
    }
    x.t.device.device_type = MC_DEVICE_CPU;
    x.t.dtype.bits = 64;
    expect_failure("float64 x", p_mc_gelu_fwd(&x.t, 0, &y.t, NULL), MC_ERR_UNSUPPORTED_DTYPE, "x", &y, before);
    x.t.dtype = BF16;
    expect_failure("mixed dtypes", p_mc_silu_fwd(&x.t, &y.t, NULL), MC_ERR_UNSUPPORTED_DTYPE, "y", &y, before);
    x.t.dtype = F32;
    int64_t strides[2] = {16, 2};
    x.t.strides = strides;
    expect_failure("strided last dim", p_mc_softmax_fwd(&x.t, &y.t, NULL), MC_ERR_UNSUPPORTED_LAYOUT, "stride", &y,
                   before);
    x.t.strides = NULL;
    tensor shifted = y;
    shifted.t.data = (float*)x.mem + 1;
    memcpy(before, x.mem, (size_t)x.n * 4);
    expect_failure("partial overlap", p_mc_softmax_fwd(&x.t, &shifted.t, NULL), MC_ERR_INVALID_ARGUMENT, "overlap",
                   &x, before);
    int dummy;
    memcpy(before, y.mem, (size_t)y.n * 4);
    expect_failure("encoder for CPU", p_mc_softmax_fwd(&x.t, &y.t, &dummy), MC_ERR_INVALID_ARGUMENT, "encoder", &y,
                   before);
    int64_t bytes = 42;
    CHECK(p_mc_rmsnorm_bwd_workspace_size(&x.t, NULL) == MC_ERR_INVALID_ARGUMENT, "NULL bytes");
    CHECK(p_mc_layernorm_bwd_workspace_size(NULL, &bytes) == MC_ERR_INVALID_ARGUMENT && bytes == 42, "NULL x");
    /* in place is fine */
    CHECK(p_mc_softmax_fwd(&x.t, &x.t, NULL) == MC_OK, "in place: %s", p_mc_last_error());
    /* empty tensors launch nothing and succeed */
    tensor e = make(F32, 2, 0, 8);
    CHECK(p_mc_softmax_fwd(&e.t, &e.t, NULL) == MC_OK, "empty: %s", p_mc_last_error());
    free(before), free(x.mem), free(w.mem), free(y.mem), free(w7.mem), free(e.mem);
}

/* The error message is per thread: a failure on one thread is not seen on
 * another. */
static void* fail_on_thread(void* arg) {
    (void)arg;
    p_mc_softmax_fwd(NULL, NULL, NULL);
    return strstr(p_mc_last_error(), "mc_softmax_fwd") ? (void*)1 : NULL;
}

static void check_thread_local_errors(void) {
    tensor x = make(F32, 2, 2, 4);
    fill(&x, 1);
    CHECK(p_mc_silu_fwd(NULL, &x.t, NULL) == MC_ERR_INVALID_ARGUMENT, "silu NULL");
    pthread_t th;
    void* ok = NULL;
    pthread_create(&th, NULL, fail_on_thread, NULL);
    pthread_join(th, &ok);
    CHECK(ok == (void*)1, "message on the failing thread");
    CHECK(strstr(p_mc_last_error(), "mc_silu_fwd") != NULL, "this thread's message was replaced: %s",
          p_mc_last_error());
    free(x.mem);
}

/* The CPU backend's thread count can be read and set; the instruction set
 * in use is named (MC_CPU_ISA, when set, is obeyed). */
static void check_cpu_settings(void) {
    int32_t threads = p_mc_cpu_threads();
    CHECK(threads >= 1, "mc_cpu_threads() = %d", threads);
    CHECK(p_mc_set_cpu_threads(3) == MC_OK && p_mc_cpu_threads() == 3, "set 3 threads");
    tensor x = make(F32, 2, 64, 4096), y = make(F32, 2, 64, 4096);
    fill(&x, 1);
    CHECK(p_mc_softmax_fwd(&x.t, &y.t, NULL) == MC_OK, "softmax on 3 threads: %s", p_mc_last_error());
    free(x.mem);
    free(y.mem);
    CHECK(p_mc_set_cpu_threads(0) == MC_ERR_INVALID_ARGUMENT && strstr(p_mc_last_error(), "mc_set_cpu_threads"),
          "0 threads refused: %s", p_mc_last_error());
    CHECK(p_mc_cpu_threads() == 3, "a refused setting changes nothing");
    CHECK(p_mc_set_cpu_threads(threads) == MC_OK, "restore %d threads", threads);
    const char* isa = p_mc_cpu_isa();
    CHECK(!strcmp(isa, "avx512") || !strcmp(isa, "avx2") || !strcmp(isa, "portable"), "mc_cpu_isa() = %s", isa);
    const char* forced = getenv("MC_CPU_ISA");
    if (forced) CHECK(!strcmp(isa, forced), "MC_CPU_ISA=%s but mc_cpu_isa() = %s", forced, isa);
    printf("abi_test: CPU: %s, %d threads\n", isa, threads);
}

/* A child forked after the library was loaded (Python's multiprocessing,
 * DataLoader workers) gets MC_ERR_BACKEND with a message from every op, its
 * outputs untouched, and never hangs: the Go runtime does not survive fork.
 * Once with the parent idle, and with another thread of the parent inside
 * metalcore at the moment of the fork. */
static void check_forked_child(const char* what) {
    pid_t pid = fork();
    if (pid == 0) {
        alarm(20);
        tensor x = make(F32, 2, 1, 1000000), y = make(F32, 2, 1, 1000000);
        for (int64_t i = 0; i < x.n; i++) set(&x, i, 1);  // not rand(): a parent thread may have held its lock
        int ok = p_mc_softmax_fwd(&x.t, &y.t, NULL) == MC_ERR_BACKEND;
        ok = ok && strstr(p_mc_last_error(), "mc_softmax_fwd") && strstr(p_mc_last_error(), "forked");
        ok = ok && isnan(get(&y, 0)) && isnan(get(&y, 999999));
        ok = ok && p_mc_backend_available(MC_DEVICE_CPU) == 0 && p_mc_version() == MC_VERSION_NUMBER;
        ok = ok && p_mc_cuda_prepare(0) == MC_ERR_BACKEND && p_mc_cpu_threads() == 0 && !*p_mc_cpu_isa();
        ok = ok && p_mc_set_cpu_threads(2) == MC_ERR_BACKEND;
        _exit(ok ? 0 : 1);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "forked child, %s: status %#x", what, status);
}

static volatile int busy_stop, busy_started;

static void* busy_calls(void* arg) {
    (void)arg;
    tensor x = make(F32, 2, 64, 65536), y = make(F32, 2, 64, 65536);
    for (int64_t i = 0; i < x.n; i++) set(&x, i, (double)(i % 7));
    for (; !busy_stop; busy_started = 1) p_mc_softmax_fwd(&x.t, &y.t, NULL);
    free(x.mem);
    free(y.mem);
    return NULL;
}

static void check_fork(void) {
    check_forked_child("idle parent");
    pthread_t th;
    pthread_create(&th, NULL, busy_calls, NULL);
    while (!busy_started) usleep(100);
    for (int i = 0; i < 8; i++) {
        usleep(2000);
        check_forked_child("parent busy in metalcore");
    }
    busy_stop = 1;
    pthread_join(th, NULL);
    tensor x = make(F32, 2, 1, 1000), y = make(F32, 2, 1, 1000);
    fill(&x, 1);
    CHECK(p_mc_softmax_fwd(&x.t, &y.t, NULL) == MC_OK, "parent after forking: %s", p_mc_last_error());
    free(x.mem);
    free(y.mem);
}

int main(int argc, char** argv) {
    const char* path = argc > 1 ? argv[1] : "build/libmetalcore.so";
    /* argv[2]: a library holding most of glibc's static TLS reserve for
     * late-loaded libraries, loaded first as a host's own libraries would
     * be; metalcore must still load after it. */
    if (argc > 2 && !dlopen(argv[2], RTLD_NOW | RTLD_LOCAL)) {
        fprintf(stderr, "dlopen %s: %s\n", argv[2], dlerror());
        return 2;
    }
    void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "dlopen %s: %s\n", path, dlerror());
        return 2;
    }
#define RESOLVE(name)                                                    \
    p_##name = (__typeof__(p_##name))dlsym(lib, #name);                  \
    if (!p_##name) {                                                     \
        fprintf(stderr, "%s: missing symbol %s\n", path, #name);         \
        return 2;                                                        \
    }
    FUNCS(RESOLVE)
    CHECK(p_mc_version() == MC_VERSION_NUMBER, "version %d, the header's is %d", p_mc_version(), MC_VERSION_NUMBER);
    CHECK(strlen(p_mc_version_string()) >= 5, "version string");
    CHECK(p_mc_backend_available(MC_DEVICE_CPU) == 1, "CPU available");
    CHECK(p_mc_backend_available(12345) == 0, "unknown backend");
    if (!p_mc_backend_available(MC_DEVICE_CUDA)) { /* no driver, or MC_CUDA_DRIVER points at nothing */
        CHECK(p_mc_cuda_prepare(0) == MC_ERR_UNSUPPORTED_DEVICE, "prepare without CUDA");
        CHECK(strstr(p_mc_last_error(), "unavailable") != NULL, "prepare message: %s", p_mc_last_error());
        printf("abi_test: CUDA unavailable: %s\n", p_mc_last_error());
    } else {
        CHECK(p_mc_cuda_prepare(0) == MC_OK, "mc_cuda_prepare(0): %s", p_mc_last_error());
    }
    if (!p_mc_backend_available(MC_DEVICE_METAL)) { /* not macOS */
        int dummy = 0;
        CHECK(p_mc_metal_prepare(&dummy) == MC_ERR_UNSUPPORTED_DEVICE, "Metal prepare off macOS");
        CHECK(strstr(p_mc_last_error(), "macOS") != NULL, "Metal prepare message: %s", p_mc_last_error());
    }
    srand(1);
    int64_t shapes[][2] = {{1, 1}, {3, 7}, {4, 33}, {2, 1030}, {5, 4096}, {1, 9001}, {64, 96}};
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        for (int b = 0; b < 2; b++) {
            check_norms(b ? BF16 : F32, shapes[i][0], shapes[i][1]);
            check_softmax_activations(b ? BF16 : F32, shapes[i][0], shapes[i][1]);
            check_cross_entropy(b ? BF16 : F32, shapes[i][0], shapes[i][1]);
        }
    }
    check_cpu_settings();
    check_adamw();
    check_qr();
    check_cholesky();
    check_solve();
    check_eigh();
    check_svd();
    check_bad_inputs();
    check_thread_local_errors();
    check_fork();
    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    printf("abi_test: all checks passed (%s, version %s)\n", path, p_mc_version_string());
    return 0;
}
