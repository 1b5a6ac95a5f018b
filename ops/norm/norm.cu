// Normalization kernels: one block per row (forward), a fixed number of row
// blocks with per-column partials in the workspace (backward), and a column
// sum of those partials. Strides are in elements, per row.

// The passes over a row are function objects, f(values, k, s) for piece k
// at element s, given to Row's load and each.

// ss: the sum of squares (pieces are zero past the row's end)
template <class D> struct SumSquares {
    enum { N = Vec<D>::N };
    float ss;
    MC_METHOD void operator()(MC_THREAD const float* v, int, int) {
        for (int j = 0; j < N; j++) ss += v[j] * v[j];
    }
};

// y = x * inv * w (w optional): the second pass of both RMSNorm forwards
template <class D> struct RmsWrite {
    enum { N = Vec<D>::N };
    float inv;
    MC_GLOBAL const typename D::T* w;
    MC_GLOBAL typename D::T* y;
    int cols;
    bool wvec, yvec;
    MC_METHOD void operator()(MC_THREAD const float* v, int, int s) const {
        float o[N], wv[N];
        if (w) mc_fetch<D>(w, cols, wvec, s, wv);
        for (int j = 0; j < N; j++) o[j] = v[j] * inv * (w ? wv[j] : 1.f);
        mc_store<D>(y, cols, yvec, s, o);
    }
};
template <class D, int C>
MC_DEVICE void rms_write(MC_IDS, MC_THREAD Row<D, C>& x, float inv, MC_GLOBAL const typename D::T* w,
                         MC_GLOBAL typename D::T* y) {
    enum { N = Vec<D>::N };
    RmsWrite<D> f = {inv, w, y, x.cols, w && mc_aligned(w, x.cols, N), mc_aligned(y, x.cols, N)};
    mc_row_each(id, x, f);
}

// A block takes rows MC_BLOCK, + MC_NBLOCKS, ...: rmsnorm_fwd is launched
// with a block per row; rmsnorm_fwd_ahead with as many blocks as fit the
// GPU at once, each fetching its next row while it reduces and writes the
// current one (w then stays in the multiprocessor's L1).
template <class D, bool ahead> struct RmsNormRows {
    typedef typename D::T T;
    MC_IDS;
    MC_GROUP float* red;
    MC_THREAD Row<D, MC_CACHE>& x;
    MC_GLOBAL const T* xb;
    mc_i64 xs;
    MC_GLOBAL const T* w;
    MC_GLOBAL T* y;
    mc_i64 ys;
    MC_GLOBAL float* rstd;
    int rows, cols;
    float eps;
    MC_METHOD void operator()(mc_i64 r) {
        x.init(xb + r * xs, cols);
        SumSquares<D> sq = {0.f};
        mc_row_load(id, x, sq);
        if (ahead) x.fetch_next(id, xb, xs, r, rows);
        float inv = rsqrtf(mc_block_sum(id, sq.ss, red) / cols + eps);
        rms_write<D>(id, x, inv, w, y + r * ys);
        if (rstd && MC_TID == 0) rstd[r] = inv;
    }
};
template <class D, bool ahead>
MC_DEVICE void rmsnorm_rows(MC_IDS, MC_GROUP float* red, MC_GLOBAL const void* x, mc_i64 xs, MC_GLOBAL const void* w,
                            MC_GLOBAL void* y, mc_i64 ys, MC_GLOBAL float* rstd, int rows, int cols, float eps) {
    typedef typename D::T T;
    Row<D, MC_CACHE> row;
    RmsNormRows<D, ahead> f = {
        id, red, row, (MC_GLOBAL const T*)x, xs, (MC_GLOBAL const T*)w, (MC_GLOBAL T*)y, ys, rstd, rows, cols, eps};
    mc_for_rows<ahead>(id, rows, f);
}
#define MC_RMSNORM_FWD_PARAMS                                                                                          \
    (MC_GLOBAL const void* x, mc_i64 xs, MC_GLOBAL const void* w, MC_GLOBAL void* y, mc_i64 ys, MC_GLOBAL float* rstd, \
     int rows, int cols, float eps)
#define MC_RMSNORM_FWD_ARGS (x, xs, w, y, ys, rstd, rows, cols, eps)
template <class D>
MC_DEVICE void rmsnorm_fwd(MC_IDS, MC_GROUP float* red, MC_GLOBAL const void* x, mc_i64 xs, MC_GLOBAL const void* w,
                           MC_GLOBAL void* y, mc_i64 ys, MC_GLOBAL float* rstd, int rows, int cols, float eps) {
    rmsnorm_rows<D, false>(id, red, x, xs, w, y, ys, rstd, rows, cols, eps);
}
template <class D>
MC_DEVICE void rmsnorm_fwd_ahead(MC_IDS, MC_GROUP float* red, MC_GLOBAL const void* x, mc_i64 xs,
                                 MC_GLOBAL const void* w, MC_GLOBAL void* y, mc_i64 ys, MC_GLOBAL float* rstd, int rows,
                                 int cols, float eps) {
    rmsnorm_rows<D, true>(id, red, x, xs, w, y, ys, rstd, rows, cols, eps);
}
MC_INSTANTIATE_GROUP(rmsnorm_fwd, MC_BLOCK_SUM_SCRATCH, , MC_RMSNORM_FWD_PARAMS, MC_RMSNORM_FWD_ARGS)
MC_INSTANTIATE_GROUP(rmsnorm_fwd_ahead, MC_BLOCK_SUM_SCRATCH, , MC_RMSNORM_FWD_PARAMS, MC_RMSNORM_FWD_ARGS)

// ro = x + res rounded to the dtype, written as the pass goes; ss: its
// sum of squares
template <class D> struct AddResidual {
    enum { N = Vec<D>::N };
    MC_GLOBAL const typename D::T* res;
    MC_GLOBAL typename D::T* ro;
    int cols;
    bool resvec, rovec;
    float ss;
    MC_METHOD void operator()(MC_THREAD float* v, int, int s) {
        float rv[N];
        mc_fetch<D>(res, cols, resvec, s, rv);
        for (int j = 0; j < N; j++) {
            v[j] = D::round(v[j] + rv[j]);
            ss += s + j < cols ? v[j] * v[j] : 0.f;
        }
        mc_store<D>(ro, cols, rovec, s, v);
    }
};

// residual_out = x + residual rounded to the dtype; y = rmsnorm(residual_out) * w
template <class D>
MC_DEVICE void fused_add_rmsnorm_fwd(MC_IDS, MC_GROUP float* red, MC_GLOBAL const void* x_, mc_i64 xs,
                                     MC_GLOBAL const void* res_, mc_i64 rs, MC_GLOBAL const void* w_,
                                     MC_GLOBAL void* y_, mc_i64 ys, MC_GLOBAL void* ro_, mc_i64 ros,
                                     MC_GLOBAL float* rstd, int cols, float eps) {
    typedef typename D::T T;
    enum { N = Vec<D>::N };
    mc_i64 r = MC_BLOCK;
    MC_GLOBAL const T* res = (MC_GLOBAL const T*)res_ + r * rs;
    MC_GLOBAL T* ro = (MC_GLOBAL T*)ro_ + r * ros;
    Row<D, MC_CACHE> x;
    x.init((MC_GLOBAL const T*)x_ + r * xs, cols);
    AddResidual<D> add = {res, ro, cols, mc_aligned(res, cols, N), mc_aligned(ro, cols, N), 0.f};
    mc_row_load(id, x, add);
    float inv = rsqrtf(mc_block_sum(id, add.ss, red) / cols + eps);
    x.src = ro;  // pieces past the cache re-read the sum this thread wrote
    x.vec = add.rovec;
    rms_write<D>(id, x, inv, (MC_GLOBAL const T*)w_, (MC_GLOBAL T*)y_ + r * ys);
    if (rstd && MC_TID == 0) rstd[r] = inv;
}
MC_INSTANTIATE_GROUP(fused_add_rmsnorm_fwd, MC_BLOCK_SUM_SCRATCH, ,
                     (MC_GLOBAL const void* x, mc_i64 xs, MC_GLOBAL const void* res, mc_i64 rs, MC_GLOBAL const void* w,
                      MC_GLOBAL void* y, mc_i64 ys, MC_GLOBAL void* ro, mc_i64 ros, MC_GLOBAL float* rstd, int cols,
                      float eps),
                     (x, xs, res, rs, w, y, ys, ro, ros, rstd, cols, eps))

// the row's sum, and the sum of squared deviations from mu
template <class D> struct Sum {
    enum { N = Vec<D>::N };
    float sum;
    MC_METHOD void operator()(MC_THREAD const float* v, int, int) {
        for (int j = 0; j < N; j++) sum += v[j];
    }
};
template <class D> struct SquaredDeviations {
    enum { N = Vec<D>::N };
    float mu;
    int cols;
    float sq;
    MC_METHOD void operator()(MC_THREAD const float* v, int, int s) {
        for (int j = 0; j < N; j++) sq += s + j < cols ? (v[j] - mu) * (v[j] - mu) : 0.f;
    }
};
// y = (x - mu) * inv * w + b (w, b optional)
template <class D> struct LayerWrite {
    enum { N = Vec<D>::N };
    float mu, inv;
    MC_GLOBAL const typename D::T *w, *b;
    MC_GLOBAL typename D::T* y;
    int cols;
    bool wvec, bvec, yvec;
    MC_METHOD void operator()(MC_THREAD const float* v, int, int s) const {
        float o[N], wv[N], bv[N];
        if (w) mc_fetch<D>(w, cols, wvec, s, wv);
        if (b) mc_fetch<D>(b, cols, bvec, s, bv);
        for (int j = 0; j < N; j++) o[j] = (v[j] - mu) * inv * (w ? wv[j] : 1.f) + (b ? bv[j] : 0.f);
        mc_store<D>(y, cols, yvec, s, o);
    }
};

// Rows as rmsnorm_rows takes them; the variance is a second pass over the
// cached row (x - mean), not E[x^2] - mean^2, which cancels.
template <class D, bool ahead> struct LayerNormRows {
    typedef typename D::T T;
    enum { N = Vec<D>::N };
    MC_IDS;
    MC_GROUP float* red;
    MC_THREAD Row<D, MC_CACHE>& x;
    MC_GLOBAL const T* xb;
    mc_i64 xs;
    MC_GLOBAL const T *w, *b;
    MC_GLOBAL T* y;
    mc_i64 ys;
    MC_GLOBAL float *mean, *rstd;
    int rows, cols;
    float eps;
    MC_METHOD void operator()(mc_i64 r) {
        x.init(xb + r * xs, cols);
        Sum<D> sum = {0.f};
        mc_row_load(id, x, sum);
        if (ahead) x.fetch_next(id, xb, xs, r, rows);
        SquaredDeviations<D> dev = {mc_block_sum(id, sum.sum, red) / cols, cols, 0.f};
        mc_row_each(id, x, dev);
        float inv = rsqrtf(mc_block_sum(id, dev.sq, red) / cols + eps);
        MC_GLOBAL T* yr = y + r * ys;
        LayerWrite<D> out = {dev.mu,
                             inv,
                             w,
                             b,
                             yr,
                             cols,
                             w && mc_aligned(w, cols, N),
                             b && mc_aligned(b, cols, N),
                             mc_aligned(yr, cols, N)};
        mc_row_each(id, x, out);
        if (MC_TID == 0) {
            if (mean) mean[r] = dev.mu;
            if (rstd) rstd[r] = inv;
        }
    }
};
template <class D, bool ahead>
MC_DEVICE void layernorm_rows(MC_IDS, MC_GROUP float* red, MC_GLOBAL const void* x, mc_i64 xs, MC_GLOBAL const void* w,
                              MC_GLOBAL const void* b, MC_GLOBAL void* y, mc_i64 ys, MC_GLOBAL float* mean,
                              MC_GLOBAL float* rstd, int rows, int cols, float eps) {
    typedef typename D::T T;
    Row<D, MC_CACHE> row;
    LayerNormRows<D, ahead> f = {id,
                                 red,
                                 row,
                                 (MC_GLOBAL const T*)x,
                                 xs,
                                 (MC_GLOBAL const T*)w,
                                 (MC_GLOBAL const T*)b,
                                 (MC_GLOBAL T*)y,
                                 ys,
                                 mean,
                                 rstd,
                                 rows,
                                 cols,
                                 eps};
    mc_for_rows<ahead>(id, rows, f);
}
#define MC_LAYERNORM_FWD_PARAMS                                                                               \
    (MC_GLOBAL const void* x, mc_i64 xs, MC_GLOBAL const void* w, MC_GLOBAL const void* b, MC_GLOBAL void* y, \
     mc_i64 ys, MC_GLOBAL float* mean, MC_GLOBAL float* rstd, int rows, int cols, float eps)
#define MC_LAYERNORM_FWD_ARGS (x, xs, w, b, y, ys, mean, rstd, rows, cols, eps)
template <class D>
MC_DEVICE void layernorm_fwd(MC_IDS, MC_GROUP float* red, MC_GLOBAL const void* x, mc_i64 xs, MC_GLOBAL const void* w,
                             MC_GLOBAL const void* b, MC_GLOBAL void* y, mc_i64 ys, MC_GLOBAL float* mean,
                             MC_GLOBAL float* rstd, int rows, int cols, float eps) {
    layernorm_rows<D, false>(id, red, x, xs, w, b, y, ys, mean, rstd, rows, cols, eps);
}
template <class D>
MC_DEVICE void layernorm_fwd_ahead(MC_IDS, MC_GROUP float* red, MC_GLOBAL const void* x, mc_i64 xs,
                                   MC_GLOBAL const void* w, MC_GLOBAL const void* b, MC_GLOBAL void* y, mc_i64 ys,
                                   MC_GLOBAL float* mean, MC_GLOBAL float* rstd, int rows, int cols, float eps) {
    layernorm_rows<D, true>(id, red, x, xs, w, b, y, ys, mean, rstd, rows, cols, eps);
}
MC_INSTANTIATE_GROUP(layernorm_fwd, MC_BLOCK_SUM_SCRATCH, , MC_LAYERNORM_FWD_PARAMS, MC_LAYERNORM_FWD_ARGS)
MC_INSTANTIATE_GROUP(layernorm_fwd_ahead, MC_BLOCK_SUM_SCRATCH, , MC_LAYERNORM_FWD_PARAMS, MC_LAYERNORM_FWD_ARGS)

// Backward (layer: LayerNorm, else RMSNorm, fixed at compile time so
// RMSNorm keeps no bias sums): block b takes rows [b*rows/P, (b+1)*rows/P)
// and, when partial is given, leaves its column sums of the weight (and
// bias) gradient terms in partial[b*ncol*cols ...] (ncol = 1 for RMSNorm, 2
// for LayerNorm). The first C pieces of dy and x (16 elements: 4 float32
// pieces, 2 of 16-bit) stay in registers and accumulate there; wider rows
// re-read and add in memory (each thread owns its columns).
// The helpers take the kernel's state by reference, as locals of
// norm_bwd (not members of one object: registers measured 20-30% more).

// w's cached piece k (starting at s): from registers (wc, with `ahead`), or
// fetched into buf
template <class D, bool ahead>
MC_DEVICE MC_THREAD const float* norm_w_piece(MC_THREAD const float* wc, MC_GLOBAL const typename D::T* w, int cols,
                                              bool wvec, int s, MC_THREAD float* buf) {
    if (ahead) return wc;
    if (w) mc_fetch<D>(w, cols, wvec, s, buf);
    return buf;
}
// starts loading the cached pieces of row r's dy and x (raw) when `ahead`
// and the row is the block's; returns whether it did
template <class D, bool ahead, int C>
MC_DEVICE bool norm_prefetch(MC_IDS, MC_THREAD uint4 (&nd)[C], MC_THREAD uint4 (&nx)[C],
                             MC_GLOBAL const typename D::T* dy, MC_GLOBAL const typename D::T* x, int cols, int n,
                             bool mine) {
    enum { N = Vec<D>::N };
    bool vec = ahead && mine && mc_aligned(dy, cols, N) && mc_aligned(x, cols, N);
#pragma unroll
    for (int k = 0; k < C; k++) {
        int s = mc_piece_start(id, k, N);
        if (vec && k < n && s < cols) {
            nd[k] = *(MC_GLOBAL const uint4*)(dy + s);
            nx[k] = *(MC_GLOBAL const uint4*)(x + s);
        }
    }
    return vec;
}
// pass 1: sum(g) and sum(g * xhat) (RMSNorm: sum(g * x)); wv unused without w
template <int N, bool layer>
MC_DEVICE void norm_sums(MC_THREAD const float* d, MC_THREAD const float* xv, MC_THREAD const float* wv, bool w,
                         float mu, float inv, MC_THREAD float& sg, MC_THREAD float& sgx) {
    for (int j = 0; j < N; j++) {
        float g = d[j] * (w ? wv[j] : 1.f);
        sg += g;
        sgx += g * (layer ? (xv[j] - mu) * inv : xv[j]);
    }
}
// pass 2's row statistics and coefficients
struct NormGradTerms {
    float mu, inv, a, c;
};
// pass 2: dx, and the weight/bias terms added to aw/ab
template <class D, bool layer>
MC_DEVICE void norm_grads(MC_THREAD const float* d, MC_THREAD const float* xv, MC_THREAD const float* wv, bool w,
                          NormGradTerms t, MC_GLOBAL typename D::T* dx, int cols, bool dxvec, int s,
                          MC_THREAD float* aw, MC_THREAD float* ab) {
    enum { N = Vec<D>::N };
    float o[N];
    for (int j = 0; j < N; j++) {
        float xh = layer ? (xv[j] - t.mu) * t.inv : xv[j];
        o[j] = t.inv * (d[j] * (w ? wv[j] : 1.f) - t.c * xh - t.a);
        aw[j] += d[j] * (layer ? xh : xv[j] * t.inv);
        ab[j] += d[j];
    }
    mc_store<D>(dx, cols, dxvec, s, o);
}

template <class D, bool layer, bool ahead>
MC_DEVICE void norm_bwd(MC_IDS, MC_GROUP float* red, MC_GLOBAL const void* dy_, mc_i64 dys, MC_GLOBAL const void* x_,
                        mc_i64 xs, MC_GLOBAL const void* w_, MC_GLOBAL const float* mean, MC_GLOBAL const float* rstd,
                        MC_GLOBAL void* dx_, mc_i64 dxs, MC_GLOBAL float* partial, int rows, int cols) {
    typedef typename D::T T;
    enum { N = Vec<D>::N, C = 16 / N };
    int nb = (int)MC_NBLOCKS;
    int r0 = (int)(MC_BLOCK * rows / nb), r1 = (int)((MC_BLOCK + 1) * rows / nb);
    MC_GLOBAL const T* w = (MC_GLOBAL const T*)w_;
    MC_GLOBAL const T* dyb = (MC_GLOBAL const T*)dy_;
    MC_GLOBAL const T* xb = (MC_GLOBAL const T*)x_;
    bool wvec = w && mc_aligned(w, cols, N);
    MC_GLOBAL float* part = partial ? partial + MC_BLOCK * (layer ? 2 : 1) * cols : 0;
    float accw[C][N], accb[C][N];
#pragma unroll
    for (int k = 0; k < C; k++)
        for (int j = 0; j < N; j++) accw[k][j] = accb[k][j] = 0.f;
    int n = (cols + N * MC_NTHREADS - 1) / (N * MC_NTHREADS);
    // With `ahead`, the cached pieces of w are read once, and those of the
    // next row's dy and x are fetched (raw) before this row's reduction, so
    // that the block keeps loads in flight while it reduces and writes. That
    // costs registers: the host takes it for rows of up to 256 threads.
    float wc[ahead ? C : 1][N];
    if (ahead)
#pragma unroll
        for (int k = 0; k < C; k++)
            if (w && k < n) mc_fetch<D>(w, cols, wvec, mc_piece_start(id, k, N), wc[ahead ? k : 0]);
    // Not Ahead<D, C> twice: one alignment flag for both rows measured up to
    // 9% faster for bfloat16 RMSNorm backward than a flag each.
    uint4 nd[C], nx[C];
    bool nvec = norm_prefetch<D, ahead, C>(id, nd, nx, dyb + (mc_i64)r0 * dys, xb + (mc_i64)r0 * xs, cols, n, r0 < r1);
    if (part)
        for (int k = C; k < n; k++)
            for (int j = 0, s = mc_piece_start(id, k, N); j < N; j++)
                if (s + j < cols) {
                    part[s + j] = 0.f;
                    if (layer) part[cols + s + j] = 0.f;
                }
    for (int r = r0; r < r1; r++) {
        MC_GLOBAL const T* dy = dyb + (mc_i64)r * dys;
        MC_GLOBAL const T* x = xb + (mc_i64)r * xs;
        MC_GLOBAL T* dx = (MC_GLOBAL T*)dx_ + (mc_i64)r * dxs;
        bool dyvec = mc_aligned(dy, cols, N), xvec = mc_aligned(x, cols, N), dxvec = mc_aligned(dx, cols, N);
        float mu = layer ? mean[r] : 0.f, inv = rstd[r];
        float sg = 0.f, sgx = 0.f;
        float dc[C][N], xc[C][N];
#pragma unroll
        for (int k = 0; k < C; k++) {
            int s = mc_piece_start(id, k, N);
            if (k < n) {
                if (nvec && s < cols) {
                    Vec<D>::unpack(nd[k], dc[k]);
                    Vec<D>::unpack(nx[k], xc[k]);
                } else {
                    mc_fetch<D>(dy, cols, dyvec, s, dc[k]);
                    mc_fetch<D>(x, cols, xvec, s, xc[k]);
                }
            }
        }
        nvec = norm_prefetch<D, ahead, C>(id, nd, nx, dy + dys, x + xs, cols, n, r + 1 < r1);
#pragma unroll
        for (int k = 0; k < C; k++)
            if (k < n) {
                float buf[N];
                int s = mc_piece_start(id, k, N);
                MC_THREAD const float* wv = norm_w_piece<D, ahead>(wc[ahead ? k : 0], w, cols, wvec, s, buf);
                norm_sums<N, layer>(dc[k], xc[k], wv, w, mu, inv, sg, sgx);
            }
        for (int k = C; k < n; k++) {
            int s = mc_piece_start(id, k, N);
            float d[N], xv[N], wv[N];
            mc_fetch<D>(dy, cols, dyvec, s, d);
            mc_fetch<D>(x, cols, xvec, s, xv);
            if (w) mc_fetch<D>(w, cols, wvec, s, wv);
            norm_sums<N, layer>(d, xv, wv, w, mu, inv, sg, sgx);
        }
        if (layer) mc_block_sum2(id, sg, sgx, red);
        else sgx = mc_block_sum(id, sgx, red);  // RMSNorm needs no sum(g)
        NormGradTerms t = {mu, inv, layer ? sg / cols : 0.f, layer ? sgx / cols : sgx * inv * inv / cols};
#pragma unroll
        for (int k = 0; k < C; k++) {
            int s = mc_piece_start(id, k, N);
            if (k < n) {
                float buf[N];
                MC_THREAD const float* wv = norm_w_piece<D, ahead>(wc[ahead ? k : 0], w, cols, wvec, s, buf);
                norm_grads<D, layer>(dc[k], xc[k], wv, w, t, dx, cols, dxvec, s, accw[k], accb[k]);
            }
        }
        for (int k = C; k < n; k++) {
            int s = mc_piece_start(id, k, N);
            float d[N], xv[N], wv[N], aw[N], ab[N];
            mc_fetch<D>(dy, cols, dyvec, s, d);
            mc_fetch<D>(x, cols, xvec, s, xv);
            if (w) mc_fetch<D>(w, cols, wvec, s, wv);
            for (int j = 0; j < N; j++) aw[j] = ab[j] = 0.f;
            norm_grads<D, layer>(d, xv, wv, w, t, dx, cols, dxvec, s, aw, ab);
            if (part)
                for (int j = 0; j < N; j++)
                    if (s + j < cols) {
                        part[s + j] += aw[j];
                        if (layer) part[cols + s + j] += ab[j];
                    }
        }
    }
    if (!part) return;
#pragma unroll
    for (int k = 0; k < C; k++)
        for (int j = 0, s = mc_piece_start(id, k, N); j < N; j++)
            if (k < n && s + j < cols) {
                part[s + j] = accw[k][j];
                if (layer) part[cols + s + j] = accb[k][j];
            }
}

// The backward kernels, without and with the next row fetched ahead.
#define MC_NORM_BWD_PARAMS                                                                              \
    (MC_GLOBAL const void* dy, mc_i64 dys, MC_GLOBAL const void* x, mc_i64 xs, MC_GLOBAL const void* w, \
     MC_GLOBAL const float* mean, MC_GLOBAL const float* rstd, MC_GLOBAL void* dx, mc_i64 dxs,          \
     MC_GLOBAL float* partial, int rows, int cols)
#define MC_NORM_BWD_ARGS (dy, dys, x, xs, w, mean, rstd, dx, dxs, partial, rows, cols)
#define MC_NORM_BWD(NAME, LAYER, AHEAD)                                                                               \
    template <class D>                                                                                                \
    MC_DEVICE void NAME(MC_IDS, MC_GROUP float* red, MC_GLOBAL const void* dy, mc_i64 dys, MC_GLOBAL const void* x,   \
                        mc_i64 xs, MC_GLOBAL const void* w, MC_GLOBAL const float* mean, MC_GLOBAL const float* rstd, \
                        MC_GLOBAL void* dx, mc_i64 dxs, MC_GLOBAL float* partial, int rows, int cols) {               \
        norm_bwd<D, LAYER, AHEAD>(id, red, dy, dys, x, xs, w, mean, rstd, dx, dxs, partial, rows, cols);              \
    }
MC_NORM_BWD(rmsnorm_bwd, false, false)
MC_NORM_BWD(rmsnorm_bwd_ahead, false, true)
MC_NORM_BWD(layernorm_bwd, true, false)
MC_NORM_BWD(layernorm_bwd_ahead, true, true)
// The kernels without `ahead` take rows of 512 threads: bounded so that such
// a block always fits (the compiler's own choice, 118-128 registers, is at
// the edge; one more would leave it 384 threads, every row's pieces past
// those cached re-read from memory).
MC_INSTANTIATE_GROUP(rmsnorm_bwd, MC_BLOCK_SUM2_SCRATCH, MC_BOUNDS(512, 1), MC_NORM_BWD_PARAMS, MC_NORM_BWD_ARGS)
MC_INSTANTIATE_GROUP(rmsnorm_bwd_ahead, MC_BLOCK_SUM2_SCRATCH, , MC_NORM_BWD_PARAMS, MC_NORM_BWD_ARGS)
MC_INSTANTIATE_GROUP(layernorm_bwd, MC_BLOCK_SUM2_SCRATCH, MC_BOUNDS(512, 1), MC_NORM_BWD_PARAMS, MC_NORM_BWD_ARGS)
MC_INSTANTIATE_GROUP(layernorm_bwd_ahead, MC_BLOCK_SUM2_SCRATCH, , MC_NORM_BWD_PARAMS, MC_NORM_BWD_ARGS)

// out[c] = sum over blocks b of partial[b*stride + c], for each of the
// gradients out0 and out1 (absent where NULL), out1's partials cols floats
// past out0's: the blocks of gradient i are [i*colBlocks, (i+1)*colBlocks),
// colBlocks = ceil(cols / 32), so that one launch sums both of LayerNorm's.
// A block of up to 256 threads takes 32 columns: its groups of 32 (8 at
// most) each sum every ng-th partial row, then the groups' sums add in group
// order, so the result does not depend on timing (deterministic). part: 8
// rows of 33 floats.
template <int NG>
MC_DEVICE float column_part(MC_GLOBAL const float* partial, int group, int blocks, mc_i64 stride, int c, int ng) {
    float s = 0.f;
    for (int b = group; b < blocks; b += NG ? NG : ng) s += partial[b * stride + c];
    return s;
}

template <class D>
MC_DEVICE void column_sum(MC_IDS, MC_GROUP float* part, MC_GLOBAL const float* partial, int blocks, mc_i64 stride,
                          int cols, MC_GLOBAL void* out0, MC_GLOBAL void* out1) {
    mc_i64 col_blocks = (cols + 31) / 32, which = MC_BLOCK / col_blocks;
    MC_GLOBAL void* out = which ? out1 : out0;
    if (!out) return;
    partial += which * cols;
    int lane = MC_TID & 31, group = MC_TID >> 5, ng = MC_NTHREADS >> 5;
    int c = (int)((MC_BLOCK - which * col_blocks) * 32 + lane);
    float s = 0.f;
    if (c < cols)
        s = ng == 8 ? column_part<8>(partial, group, blocks, stride, c, ng)
                    : column_part<0>(partial, group, blocks, stride, c, ng);
    part[group * 33 + lane] = s;
    MC_BARRIER();
    if (group == 0 && c < cols) {
        for (int g = 1; g < ng; g++) s += part[g * 33 + lane];
        D::store((MC_GLOBAL typename D::T*)out + c, s);
    }
}
MC_INSTANTIATE_GROUP(column_sum, 8 * 33, ,
                     (MC_GLOBAL const float* partial, int blocks, mc_i64 stride, int cols, MC_GLOBAL void* out0,
                      MC_GLOBAL void* out1),
                     (partial, blocks, stride, cols, out0, out1))
