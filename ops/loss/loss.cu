// Cross-entropy over the last dimension: one block per row, two passes (or
// one each way, where the forward keeps the row's log-sum-exp for the
// backward). The first finds the row's maximum and the sum of its exponentials
// together (online: the sum is rescaled whenever the maximum rises) and its
// sum (for label smoothing), combined through the block's shared memory (so
// that an in-place gradient never overwrites a logit another thread has yet
// to read); the second writes the gradient. The first pass keeps the row on
// chip for the second: MC_CACHE pieces a thread in registers, then up to
// `spill` more in shared memory (in the row's dtype), so that a vocabulary
// row up to both is read from memory once.

// The floats of shared memory before the spilled pieces: the reductions'
// scratch, rounded up to 16 bytes (ops/loss's spillPieces).
#define CE_SCRATCH 68

// ce_piece is piece s of the row as its 16 raw bytes (zero past the row's
// end), for shared memory.
template <class D, int C> MC_DEVICE uint4 ce_piece(MC_THREAD const Row<D, C>& row, int s) {
    enum { N = Vec<D>::N };
    if (row.vec && s < row.cols) return *(MC_GLOBAL const uint4*)(row.src + s);
    uint4 raw;
    MC_THREAD typename D::T* e = (MC_THREAD typename D::T*)&raw;
    for (int j = 0; j < N; j++) e[j] = s + j < row.cols ? row.src[s + j] : D::pack(0.f);
    return raw;
}

// ce_load is mc_row_load keeping pieces [C, C + spill) of each thread in
// spilled as well (thread-major: a warp's 16-byte pieces side by side),
// loaded CE_AHEAD at a time so that a thread has several in flight;
// ce_each passes them to f again from there.
#define CE_AHEAD 4
template <class D, int C, class F>
MC_DEVICE void ce_load(MC_IDS, MC_THREAD Row<D, C>& row, MC_GROUP uint4* spilled, int spill, MC_THREAD F& f) {
    enum { N = Vec<D>::N };
    int n = row.pieces(id), end = n < C + spill ? n : C + spill;
    mc_row_load_cached(id, row, f);
    for (int k = C; k < end; k += CE_AHEAD) {
        uint4 raw[CE_AHEAD];
#pragma unroll
        for (int u = 0; u < CE_AHEAD; u++)
            if (k + u < end) raw[u] = ce_piece(row, mc_piece_start(id, k + u, N));
#pragma unroll
        for (int u = 0; u < CE_AHEAD; u++)
            if (k + u < end) {
                spilled[(k + u - C) * MC_NTHREADS + MC_TID] = raw[u];
                float v[N];
                Vec<D>::unpack(raw[u], v);
                f(v, k + u, mc_piece_start(id, k + u, N));
            }
    }
    mc_row_stream<D, 2>(id, row.src, row.cols, row.vec, end, f);
}
template <class D, int C, class F>
MC_DEVICE void ce_each(MC_IDS, MC_THREAD Row<D, C>& row, MC_GROUP uint4* spilled, int spill, MC_THREAD F& f) {
    enum { N = Vec<D>::N };
    int n = row.pieces(id), end = n < C + spill ? n : C + spill;
    mc_row_each_cached(id, row, f);
    for (int k = C; k < end; k++) {
        float v[N];
        Vec<D>::unpack(spilled[(k - C) * MC_NTHREADS + MC_TID], v);
        f(v, k, mc_piece_start(id, k, N));
    }
    mc_row_stream<D, 2>(id, row.src, row.cols, row.vec, end, f);
}

// exp(x - c) as the kernels take it: exp2 of one fused multiply-add (c2 =
// c * log2(e))
#define CE_LOG2E 1.4426950408889634f
MC_DEVICE float ce_exp(float x, float c2) { return exp2f(fmaf(x, CE_LOG2E, -c2)); }

// the running maximum m, the sum of exp(x - m) and (for label smoothing)
// the sum of the row; a piece's maximum first, so that its exponentials are
// independent of each other. A NaN never raises m and makes the sum NaN.
template <class D> struct CeFirst {
    enum { N = Vec<D>::N };
    int cols;
    bool smooth;
    float m, sum, sx;
    MC_METHOD void operator()(MC_THREAD const float* v, int, int s) {
        float w[N];  // past the row's end: -inf, which adds nothing (a whole piece: one compare)
        for (int j = 0; j < N; j++) w[j] = s + N <= cols || s + j < cols ? v[j] : -mc_inf();
        float pm = m;
        for (int j = 0; j < N; j++) pm = fmaxf(pm, w[j]);
        if (pm > m) {
            sum *= ce_exp(m, pm * CE_LOG2E);
            m = pm;
        }
        if (smooth)
            for (int j = 0; j < N; j++) sx += s + j < cols ? v[j] : 0.f;
        if (m == -mc_inf()) return;  // all -inf so far: nothing to add
        float ps = 0.f, m2 = m * CE_LOG2E;
        for (int j = 0; j < N; j++) ps += ce_exp(w[j], m2);
        sum += ps;
    }
};
// g = scale * (exp(x - lse) - (1 - smoothing) [j = t] - smoothing / V), NaN
// throughout for a target out of range or a maximum that is not finite
template <class D> struct CeGrad {
    enum { N = Vec<D>::N };
    float lse2, scale, spread, hit, nan;
    int t;
    MC_GLOBAL typename D::T* g;
    int cols;
    bool gvec, bad;
    MC_METHOD void operator()(MC_THREAD const float* v, int, int s) const {
        float o[N];
        for (int j = 0; j < N; j++) o[j] = bad ? nan : (ce_exp(v[j], lse2) - spread - (s + j == t ? hit : 0.f)) * scale;
        mc_store<D>(g, cols, gvec, s, o);
    }
};

// has_scale: 0, none (1); 1, one for every row; 2, one per row. stats: 0,
// none; 1, write each row's log-sum-exp to lse; 2, read it there (no loss,
// and the gradient from one pass over the row). spill: the pieces a thread
// keeps in shared memory past its registers, after CE_SCRATCH floats.
template <class D>
MC_DEVICE void cross_entropy(MC_IDS, MC_GROUP float4* S4, MC_GLOBAL const void* x_, mc_i64 xs,
                             MC_GLOBAL const mc_i64* target, mc_i64 ignore, float smoothing,
                             MC_GLOBAL const float* scale, int has_scale, MC_GLOBAL float* loss, MC_GLOBAL void* g_,
                             mc_i64 gs, int has_grad, MC_GLOBAL float* lse, int stats, int cols, int spill) {
    typedef typename D::T T;
    enum { N = Vec<D>::N };
    MC_GROUP float* red = (MC_GROUP float*)S4;
    MC_GROUP uint4* spilled = (MC_GROUP uint4*)(red + CE_SCRATCH);
    mc_i64 r = MC_BLOCK, t = target[r];
    MC_GLOBAL T* g = (MC_GLOBAL T*)g_ + r * gs;
    MC_GLOBAL const T* xr = (MC_GLOBAL const T*)x_ + r * xs;
    if (t == ignore) {  // the whole block: loss 0, gradient 0
        if (MC_TID == 0 && stats != 2) loss[r] = 0.f;
        if (MC_TID == 0 && stats == 1) lse[r] = 0.f;
        if (has_grad)
            for (int i = MC_TID; i < cols; i += MC_NTHREADS) D::store(g + i, 0.f);
        return;
    }
    float v = (float)cols, nan = mc_inf() - mc_inf();
    bool in_range = t >= 0 && t < cols;
    Row<D, MC_CACHE> x;
    x.init(xr, cols);
    float l;  // the row's log-sum-exp
    bool bad;
    if (stats == 2) {
        l = lse[r];
        bad = !in_range || !(l < mc_inf() && l > -mc_inf());
    } else {
        // the target's logit, read before any thread may write the gradient
        // over it
        float xt = MC_TID == 0 && in_range ? D::load(xr + t) : 0.f;
        CeFirst<D> first = {cols, smoothing > 0.f, -mc_inf(), 0.f, 0.f};
        if (has_grad) ce_load(id, x, spilled, spill, first);  // the gradient's pass reads the kept pieces
        else mc_row_stream<D, 4>(id, xr, cols, x.vec, 0, first);
        float m = mc_block_max(id, first.m, red);
        float sum = first.m == -mc_inf() ? 0.f : first.sum * ce_exp(first.m, m * CE_LOG2E), sx = first.sx;
        if (first.smooth) mc_block_sum2(id, sum, sx, red);
        else sum = mc_block_sum(id, sum, red);
        bad = !in_range || !(m < mc_inf() && m > -mc_inf());
        l = bad ? nan : m + logf(sum);
        if (MC_TID == 0) loss[r] = bad ? nan : (1.f - smoothing) * (l - xt) + smoothing * (l - sx / v);
        if (MC_TID == 0 && stats == 1) lse[r] = l;
        if (!has_grad) return;
    }
    float sc = has_scale != 0 ? scale[has_scale == 2 ? r : 0] : 1.f;
    CeGrad<D> w = {l * CE_LOG2E, sc, smoothing / v, 1.f - smoothing, nan, (int)t, g, cols, mc_aligned(g, cols, N), bad};
    if (stats == 2) mc_row_stream<D, 4>(id, xr, cols, x.vec, 0, w);  // nothing cached: one pass
    else ce_each(id, x, spilled, spill, w);
}
MC_INSTANTIATE_DYNAMIC(cross_entropy, float4, MC_BOUNDS(1024, 1),
                       (MC_GLOBAL const void* x, mc_i64 xs, MC_GLOBAL const mc_i64* target, mc_i64 ignore,
                        float smoothing, MC_GLOBAL const float* scale, int has_scale, MC_GLOBAL float* loss,
                        MC_GLOBAL void* g, mc_i64 gs, int has_grad, MC_GLOBAL float* lse, int stats, int cols,
                        int spill),
                       (x, xs, target, ignore, smoothing, scale, has_scale, loss, g, gs, has_grad, lse, stats, cols,
                        spill))

// grad *= scale[0] over n contiguous elements (a grid-stride loop of 16-byte
// pieces where aligned), nothing written where scale[0] is 1: the usual
// backward of a loss costs the launch alone.
template <class D> MC_DEVICE void loss_grad_scale(MC_IDS, MC_GLOBAL void* g_, MC_GLOBAL const float* scale, mc_i64 n) {
    typedef typename D::T T;
    enum { N = Vec<D>::N };
    float s = scale[0];
    if (s == 1.f) return;
    MC_GLOBAL T* g = (MC_GLOBAL T*)g_;
    mc_i64 stride = MC_NBLOCKS * MC_NTHREADS, first = MC_BLOCK * MC_NTHREADS + MC_TID, done = 0;
    if ((mc_u64)g % 16 == 0) {
        mc_i64 pieces = n / N;
        for (mc_i64 p = first; p < pieces; p += stride) {
            float v[N];
            Vec<D>::load(g + p * N, v);
            for (int j = 0; j < N; j++) v[j] *= s;
            Vec<D>::store(g + p * N, v);
        }
        done = pieces * N;
    }
    for (mc_i64 i = done + first; i < n; i += stride) D::store(g + i, D::load(g + i) * s);
}
MC_INSTANTIATE(loss_grad_scale, (MC_GLOBAL void* g, MC_GLOBAL const float* scale, mc_i64 n), (g, scale, n))
