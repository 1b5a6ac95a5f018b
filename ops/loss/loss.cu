// Cross-entropy over the last dimension: one block per row, two passes.
// The first finds the row's maximum and the sum of its exponentials
// together (online: the sum is rescaled whenever the maximum rises), its
// logit at the target and its sum (for label smoothing), combined through
// the block's shared memory (so that an in-place gradient never overwrites
// a logit another thread has yet to read); the second writes the gradient.

// the running maximum m, sum of exp(x - m), the target's logit and the sum
// of the row
template <class D> struct CeFirst {
    enum { N = Vec<D>::N };
    int cols;
    mc_i64 t;
    float m, sum, xt, sx;
    MC_METHOD void operator()(MC_THREAD const float* v, int, int s) {
        for (int j = 0; j < N; j++)
            if (s + j < cols) {
                float x = v[j];
                if (x > m) {
                    sum = sum * expf(m - x) + 1.f;
                    m = x;
                } else if (!(x == -mc_inf() && m == -mc_inf())) {  // NaN stays NaN
                    sum += expf(x - m);
                }
                sx += x;
                if (s + j == t) xt = x;
            }
    }
};
// g = scale * (softmax - (1 - smoothing) [j = t] - smoothing / V), NaN
// throughout for a target out of range or a maximum that is not finite
template <class D> struct CeGrad {
    enum { N = Vec<D>::N };
    float m, inv, scale, spread, hit, nan;
    mc_i64 t;
    MC_GLOBAL typename D::T* g;
    int cols;
    bool gvec, bad;
    MC_METHOD void operator()(MC_THREAD const float* v, int, int s) const {
        float o[N];
        for (int j = 0; j < N; j++)
            o[j] = bad ? nan : (expf(v[j] - m) * inv - spread - (s + j == t ? hit : 0.f)) * scale;
        mc_store<D>(g, cols, gvec, s, o);
    }
};

// has_scale: 0, none (1); 1, one for every row; 2, one per row
template <class D>
MC_DEVICE void cross_entropy(MC_IDS, MC_GROUP float* red, MC_GLOBAL const void* x_, mc_i64 xs,
                             MC_GLOBAL const mc_i64* target, mc_i64 ignore, float smoothing,
                             MC_GLOBAL const float* scale, int has_scale, MC_GLOBAL float* loss, MC_GLOBAL void* g_,
                             mc_i64 gs, int has_grad, int cols) {
    typedef typename D::T T;
    enum { N = Vec<D>::N };
    mc_i64 r = MC_BLOCK, t = target[r];
    MC_GLOBAL T* g = (MC_GLOBAL T*)g_ + r * gs;
    if (t == ignore) {  // the whole block: loss 0, gradient 0
        if (MC_TID == 0) loss[r] = 0.f;
        if (has_grad)
            for (int i = MC_TID; i < cols; i += MC_NTHREADS) D::store(g + i, 0.f);
        return;
    }
    Row<D, MC_CACHE> x;
    x.init((MC_GLOBAL const T*)x_ + r * xs, cols);
    CeFirst<D> first = {cols, t, -mc_inf(), 0.f, 0.f, 0.f};
    mc_row_load(id, x, first);
    float m = mc_block_max(id, first.m, red);
    float sum = first.m == -mc_inf() ? 0.f : first.sum * expf(first.m - m), xt = first.xt;
    mc_block_sum2(id, sum, xt, red);
    float sx = smoothing > 0.f ? mc_block_sum(id, first.sx, red) : 0.f;
    float lse = m + logf(sum), v = (float)cols, nan = mc_inf() - mc_inf();
    bool bad = t < 0 || t >= cols || !(m < mc_inf() && m > -mc_inf());
    if (MC_TID == 0) loss[r] = bad ? nan : (1.f - smoothing) * (lse - xt) + smoothing * (lse - sx / v);
    if (!has_grad) return;
    float sc = has_scale == 0 ? 1.f : scale[has_scale == 2 ? r : 0];
    CeGrad<D> w = {m, 1.f / sum, sc, smoothing / v, 1.f - smoothing, nan, t, g, cols, mc_aligned(g, cols, N), bad};
    mc_row_each(id, x, w);
}
MC_INSTANTIATE_GROUP(cross_entropy, MC_BLOCK_SUM2_SCRATCH, ,
                     (MC_GLOBAL const void* x, mc_i64 xs, MC_GLOBAL const mc_i64* target, mc_i64 ignore,
                      float smoothing, MC_GLOBAL const float* scale, int has_scale, MC_GLOBAL float* loss,
                      MC_GLOBAL void* g, mc_i64 gs, int has_grad, int cols),
                     (x, xs, target, ignore, smoothing, scale, has_scale, loss, g, gs, has_grad, cols))
