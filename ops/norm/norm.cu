// Normalization kernels: one block per row (forward), a fixed number of row
// blocks with per-column partials in the workspace (backward), and a column
// sum of those partials. Strides are in elements, per row.

// The second pass of both RMSNorm forwards: y = x * inv * w (w optional)
// over the row x holds.
template <class D, int C>
MC_DEVICE void rms_write(Row<D, C>& x, float inv, const typename D::T* w, typename D::T* y) {
    enum { N = Vec<D>::N };
    int cols = x.cols;
    bool wvec = w && mc_aligned(w, cols, N), yvec = mc_aligned(y, cols, N);
    x.each([&](float* v, int k) {
        int s = x.start(k);
        float o[N], wv[N];
        if (w) mc_fetch<D>(w, cols, wvec, s, wv);
        for (int j = 0; j < N; j++) o[j] = v[j] * inv * (w ? wv[j] : 1.f);
        mc_store<D>(y, cols, yvec, s, o);
    });
}

// A block takes rows MC_BLOCK, + MC_NBLOCKS, ...: rmsnorm_fwd is launched
// with a block per row; rmsnorm_fwd_ahead with as many blocks as fit the
// GPU at once, each fetching its next row while it reduces and writes the
// current one (w then stays in the multiprocessor's L1).
template <class D, bool ahead>
MC_DEVICE void rmsnorm_rows(const void* x_, mc_i64 xs, const void* w_, void* y_, mc_i64 ys, float* rstd, int rows,
                            int cols, float eps) {
    typedef typename D::T T;
    enum { N = Vec<D>::N };
    MC_SHARED float red[33];
    const T* xb = (const T*)x_;
    Row<D, MC_CACHE> x;
    mc_for_rows<ahead>(rows, [&](mc_i64 r) {
        x.init(xb + r * xs, cols);
        float ss = 0.f;
        x.load([&](float* v, int) {
            for (int j = 0; j < N; j++) ss += v[j] * v[j];
        });
        if constexpr (ahead) x.fetch_next(xb, xs, r, rows);
        float inv = rsqrtf(mc_block_sum(ss, red) / cols + eps);
        rms_write<D>(x, inv, (const T*)w_, (T*)y_ + r * ys);
        if (rstd && MC_TID == 0) rstd[r] = inv;
    });
}
#define MC_RMSNORM_FWD_PARAMS \
    (const void* x, mc_i64 xs, const void* w, void* y, mc_i64 ys, float* rstd, int rows, int cols, float eps)
#define MC_RMSNORM_FWD_ARGS (x, xs, w, y, ys, rstd, rows, cols, eps)
template <class D> __device__ void rmsnorm_fwd MC_RMSNORM_FWD_PARAMS { rmsnorm_rows<D, false> MC_RMSNORM_FWD_ARGS; }
template <class D> __device__ void rmsnorm_fwd_ahead MC_RMSNORM_FWD_PARAMS { rmsnorm_rows<D, true> MC_RMSNORM_FWD_ARGS; }
MC_INSTANTIATE(rmsnorm_fwd, MC_RMSNORM_FWD_PARAMS, MC_RMSNORM_FWD_ARGS)
MC_INSTANTIATE(rmsnorm_fwd_ahead, MC_RMSNORM_FWD_PARAMS, MC_RMSNORM_FWD_ARGS)

// residual_out = x + residual rounded to the dtype; y = rmsnorm(residual_out) * w
template <class D>
__device__ void fused_add_rmsnorm_fwd(const void* x_, mc_i64 xs, const void* res_, mc_i64 rs, const void* w_, void* y_,
                                      mc_i64 ys, void* ro_, mc_i64 ros, float* rstd, int cols, float eps) {
    typedef typename D::T T;
    enum { N = Vec<D>::N };
    MC_SHARED float red[33];
    mc_i64 r = MC_BLOCK;
    const T* res = (const T*)res_ + r * rs;
    T* ro = (T*)ro_ + r * ros;
    bool resvec = mc_aligned(res, cols, N), rovec = mc_aligned(ro, cols, N);
    Row<D, MC_CACHE> x;
    x.init((const T*)x_ + r * xs, cols);
    float ss = 0.f;
    x.load([&](float* v, int k) {
        int s = x.start(k);
        float rv[N];
        mc_fetch<D>(res, cols, resvec, s, rv);
        for (int j = 0; j < N; j++) {
            v[j] = D::round(v[j] + rv[j]);
            ss += s + j < cols ? v[j] * v[j] : 0.f;
        }
        mc_store<D>(ro, cols, rovec, s, v);
    });
    float inv = rsqrtf(mc_block_sum(ss, red) / cols + eps);
    x.src = ro; // pieces past the cache re-read the sum this thread wrote
    x.vec = rovec;
    rms_write<D>(x, inv, (const T*)w_, (T*)y_ + r * ys);
    if (rstd && MC_TID == 0) rstd[r] = inv;
}
MC_INSTANTIATE(fused_add_rmsnorm_fwd,
               (const void* x, mc_i64 xs, const void* res, mc_i64 rs, const void* w, void* y, mc_i64 ys, void* ro,
                mc_i64 ros, float* rstd, int cols, float eps),
               (x, xs, res, rs, w, y, ys, ro, ros, rstd, cols, eps))

// Rows as rmsnorm_rows takes them; the variance is a second pass over the
// cached row (x - mean), not E[x^2] - mean^2, which cancels.
template <class D, bool ahead>
MC_DEVICE void layernorm_rows(const void* x_, mc_i64 xs, const void* w_, const void* b_, void* y_, mc_i64 ys,
                              float* mean, float* rstd, int rows, int cols, float eps) {
    typedef typename D::T T;
    enum { N = Vec<D>::N };
    MC_SHARED float red[33];
    const T* xb = (const T*)x_;
    const T* w = (const T*)w_;
    const T* b = (const T*)b_;
    bool wvec = w && mc_aligned(w, cols, N), bvec = b && mc_aligned(b, cols, N);
    Row<D, MC_CACHE> x;
    mc_for_rows<ahead>(rows, [&](mc_i64 r) {
        x.init(xb + r * xs, cols);
        float sum = 0.f;
        x.load([&](float* v, int) {
            for (int j = 0; j < N; j++) sum += v[j];
        });
        if constexpr (ahead) x.fetch_next(xb, xs, r, rows);
        float mu = mc_block_sum(sum, red) / cols, sq = 0.f;
        x.each([&](float* v, int k) {
            int s = x.start(k);
            for (int j = 0; j < N; j++) sq += s + j < cols ? (v[j] - mu) * (v[j] - mu) : 0.f;
        });
        float inv = rsqrtf(mc_block_sum(sq, red) / cols + eps);
        T* y = (T*)y_ + r * ys;
        bool yvec = mc_aligned(y, cols, N);
        x.each([&](float* v, int k) {
            int s = x.start(k);
            float o[N], wv[N], bv[N];
            if (w) mc_fetch<D>(w, cols, wvec, s, wv);
            if (b) mc_fetch<D>(b, cols, bvec, s, bv);
            for (int j = 0; j < N; j++) o[j] = (v[j] - mu) * inv * (w ? wv[j] : 1.f) + (b ? bv[j] : 0.f);
            mc_store<D>(y, cols, yvec, s, o);
        });
        if (MC_TID == 0) {
            if (mean) mean[r] = mu;
            if (rstd) rstd[r] = inv;
        }
    });
}
#define MC_LAYERNORM_FWD_PARAMS                                                                                     \
    (const void* x, mc_i64 xs, const void* w, const void* b, void* y, mc_i64 ys, float* mean, float* rstd, int rows, \
     int cols, float eps)
#define MC_LAYERNORM_FWD_ARGS (x, xs, w, b, y, ys, mean, rstd, rows, cols, eps)
template <class D> __device__ void layernorm_fwd MC_LAYERNORM_FWD_PARAMS { layernorm_rows<D, false> MC_LAYERNORM_FWD_ARGS; }
template <class D> __device__ void layernorm_fwd_ahead MC_LAYERNORM_FWD_PARAMS {
    layernorm_rows<D, true> MC_LAYERNORM_FWD_ARGS;
}
MC_INSTANTIATE(layernorm_fwd, MC_LAYERNORM_FWD_PARAMS, MC_LAYERNORM_FWD_ARGS)
MC_INSTANTIATE(layernorm_fwd_ahead, MC_LAYERNORM_FWD_PARAMS, MC_LAYERNORM_FWD_ARGS)

// Backward (layer: LayerNorm, else RMSNorm, fixed at compile time so
// RMSNorm keeps no bias sums): block b takes rows [b*rows/P, (b+1)*rows/P)
// and, when partial is given, leaves its column sums of the weight (and
// bias) gradient terms in partial[b*ncol*cols ...] (ncol = 1 for RMSNorm, 2
// for LayerNorm). The first C pieces of dy and x (16 elements: 4 float32
// pieces, 2 of 16-bit) stay in registers and accumulate there; wider rows
// re-read and add in memory (each thread owns its columns).
template <class D, bool layer, bool ahead>
__device__ void norm_bwd(const void* dy_, mc_i64 dys, const void* x_, mc_i64 xs, const void* w_,
                         const float* mean, const float* rstd, void* dx_, mc_i64 dxs, float* partial, int rows,
                         int cols) {
    typedef typename D::T T;
    enum { N = Vec<D>::N, C = 16 / N };
    MC_SHARED float red[66];
    int nb = (int)MC_NBLOCKS;
    int r0 = (int)(MC_BLOCK * rows / nb), r1 = (int)((MC_BLOCK + 1) * rows / nb);
    const T* w = (const T*)w_;
    bool wvec = w && mc_aligned(w, cols, N);
    float* part = partial ? partial + MC_BLOCK * (layer ? 2 : 1) * cols : 0;
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
    if constexpr (ahead)
#pragma unroll
        for (int k = 0; k < C; k++)
            if (w && k < n) mc_fetch<D>(w, cols, wvec, mc_piece_start(k, N), wc[k]);
    // w's cached piece k (starting at s): from registers, or fetched into buf
    auto wpiece = [&](int k, int s, float* buf) -> const float* {
        if constexpr (ahead) return wc[k];
        if (w) mc_fetch<D>(w, cols, wvec, s, buf);
        return buf;
    };
    // Not Ahead<D, C> twice: one alignment flag for both rows measured up to
    // 9% faster for bfloat16 RMSNorm backward than a flag each.
    uint4 nd[C], nx[C];
    bool nvec = false;
    auto prefetch = [&](int r) {
        const T* dy = (const T*)dy_ + (mc_i64)r * dys;
        const T* x = (const T*)x_ + (mc_i64)r * xs;
        nvec = ahead && r < r1 && mc_aligned(dy, cols, N) && mc_aligned(x, cols, N);
#pragma unroll
        for (int k = 0; k < C; k++)
            if (int s = mc_piece_start(k, N); nvec && k < n && s < cols) {
                nd[k] = *(const uint4*)(dy + s);
                nx[k] = *(const uint4*)(x + s);
            }
    };
    prefetch(r0);
    if (part)
        for (int k = C; k < n; k++)
            for (int j = 0, s = mc_piece_start(k, N); j < N; j++)
                if (s + j < cols) {
                    part[s + j] = 0.f;
                    if (layer) part[cols + s + j] = 0.f;
                }
    for (int r = r0; r < r1; r++) {
        const T* dy = (const T*)dy_ + (mc_i64)r * dys;
        const T* x = (const T*)x_ + (mc_i64)r * xs;
        T* dx = (T*)dx_ + (mc_i64)r * dxs;
        bool dyvec = mc_aligned(dy, cols, N), xvec = mc_aligned(x, cols, N), dxvec = mc_aligned(dx, cols, N);
        float mu = layer ? mean[r] : 0.f, inv = rstd[r];
        float sg = 0.f, sgx = 0.f;
        float dc[C][N], xc[C][N];
        // pass 1: sum(g) and sum(g * xhat) (RMSNorm: sum(g * x))
        auto sums = [&](const float* d, const float* xv, const float* wv) {
            for (int j = 0; j < N; j++) {
                float g = d[j] * (w ? wv[j] : 1.f);
                sg += g;
                sgx += g * (layer ? (xv[j] - mu) * inv : xv[j]);
            }
        };
#pragma unroll
        for (int k = 0; k < C; k++)
            if (int s = mc_piece_start(k, N); k < n) {
                if (nvec && s < cols) {
                    Vec<D>::unpack(nd[k], dc[k]);
                    Vec<D>::unpack(nx[k], xc[k]);
                } else {
                    mc_fetch<D>(dy, cols, dyvec, s, dc[k]);
                    mc_fetch<D>(x, cols, xvec, s, xc[k]);
                }
            }
        prefetch(r + 1);
#pragma unroll
        for (int k = 0; k < C; k++)
            if (k < n) {
                float buf[N];
                sums(dc[k], xc[k], wpiece(k, mc_piece_start(k, N), buf));
            }
        for (int k = C; k < n; k++) {
            int s = mc_piece_start(k, N);
            float d[N], xv[N], wv[N];
            mc_fetch<D>(dy, cols, dyvec, s, d);
            mc_fetch<D>(x, cols, xvec, s, xv);
            if (w) mc_fetch<D>(w, cols, wvec, s, wv);
            sums(d, xv, wv);
        }
        if (layer) mc_block_sum2(sg, sgx, red);
        else sgx = mc_block_sum(sgx, red);  // RMSNorm needs no sum(g)
        float a = layer ? sg / cols : 0.f, c = layer ? sgx / cols : sgx * inv * inv / cols;
        // pass 2: dx, and the weight/bias terms added to aw/ab
        auto grads = [&](const float* d, const float* xv, const float* wv, int s, float* aw, float* ab) {
            float o[N];
            for (int j = 0; j < N; j++) {
                float xh = layer ? (xv[j] - mu) * inv : xv[j];
                o[j] = inv * (d[j] * (w ? wv[j] : 1.f) - c * xh - a);
                aw[j] += d[j] * (layer ? xh : xv[j] * inv);
                ab[j] += d[j];
            }
            mc_store<D>(dx, cols, dxvec, s, o);
        };
#pragma unroll
        for (int k = 0; k < C; k++)
            if (int s = mc_piece_start(k, N); k < n) {
                float buf[N];
                grads(dc[k], xc[k], wpiece(k, s, buf), s, accw[k], accb[k]);
            }
        for (int k = C; k < n; k++) {
            int s = mc_piece_start(k, N);
            float d[N], xv[N], wv[N], aw[N], ab[N];
            mc_fetch<D>(dy, cols, dyvec, s, d);
            mc_fetch<D>(x, cols, xvec, s, xv);
            if (w) mc_fetch<D>(w, cols, wvec, s, wv);
            for (int j = 0; j < N; j++) aw[j] = ab[j] = 0.f;
            grads(d, xv, wv, s, aw, ab);
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
        for (int j = 0, s = mc_piece_start(k, N); j < N; j++)
            if (k < n && s + j < cols) {
                part[s + j] = accw[k][j];
                if (layer) part[cols + s + j] = accb[k][j];
            }
}

// The backward kernels, without and with the next row fetched ahead.
#define MC_NORM_BWD(NAME, LAYER, AHEAD)                                                                               \
    template <class D>                                                                                              \
    __device__ void NAME(const void* dy, mc_i64 dys, const void* x, mc_i64 xs, const void* w, const float* mean,    \
                         const float* rstd, void* dx, mc_i64 dxs, float* partial, int rows, int cols) {             \
        norm_bwd<D, LAYER, AHEAD>(dy, dys, x, xs, w, mean, rstd, dx, dxs, partial, rows, cols);                    \
    }
MC_NORM_BWD(rmsnorm_bwd, false, false)
MC_NORM_BWD(rmsnorm_bwd_ahead, false, true)
MC_NORM_BWD(layernorm_bwd, true, false)
MC_NORM_BWD(layernorm_bwd_ahead, true, true)
#define MC_NORM_BWD_PARAMS                                                                                         \
    (const void* dy, mc_i64 dys, const void* x, mc_i64 xs, const void* w, const float* mean, const float* rstd,     \
     void* dx, mc_i64 dxs, float* partial, int rows, int cols)
#define MC_NORM_BWD_ARGS (dy, dys, x, xs, w, mean, rstd, dx, dxs, partial, rows, cols)
// The kernels without `ahead` take rows of 512 threads: bounded so that such
// a block always fits (the compiler's own choice, 118-128 registers, is at
// the edge; one more would leave it 384 threads, every row's pieces past
// those cached re-read from memory).
MC_INSTANTIATE_BOUNDS(rmsnorm_bwd, __launch_bounds__(512), MC_NORM_BWD_PARAMS, MC_NORM_BWD_ARGS)
MC_INSTANTIATE(rmsnorm_bwd_ahead, MC_NORM_BWD_PARAMS, MC_NORM_BWD_ARGS)
MC_INSTANTIATE_BOUNDS(layernorm_bwd, __launch_bounds__(512), MC_NORM_BWD_PARAMS, MC_NORM_BWD_ARGS)
MC_INSTANTIATE(layernorm_bwd_ahead, MC_NORM_BWD_PARAMS, MC_NORM_BWD_ARGS)

// out[c] = sum over blocks b of partial[b*stride + c]. A block of 256
// threads takes 32 columns: 8 groups each sum every 8th partial row, then
// the groups' sums add in group order, so the result does not depend on
// timing (deterministic).
template <class D> __device__ void column_sum(const float* partial, int blocks, mc_i64 stride, int cols, void* out) {
    MC_SHARED float part[8][33];
    int lane = MC_TID & 31, group = MC_TID >> 5;
    int c = (int)(MC_BLOCK * 32 + lane);
    float s = 0.f;
    if (c < cols)
        for (int b = group; b < blocks; b += 8) s += partial[b * stride + c];
    part[group][lane] = s;
    MC_BARRIER();
    if (group == 0 && c < cols) {
        for (int g = 1; g < 8; g++) s += part[g][lane];
        D::store((typename D::T*)out + c, s);
    }
}
MC_INSTANTIATE(column_sum, (const float* partial, int blocks, mc_i64 stride, int cols, void* out),
               (partial, blocks, stride, cols, out))
