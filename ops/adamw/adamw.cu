// Multi-tensor AdamW: one launch steps up to ADAMW_MAX tensors whose
// pointers and sizes travel by value in the kernel parameter. Block b steps
// elements [chunk*ADAMW_CHUNK, ...) of the tensor whose block range holds b.
#define ADAMW_MAX 36
#define ADAMW_CHUNK 4096
struct AdamWBatch {            // every field 8 bytes: the Go side writes words
    const void* grad[ADAMW_MAX];
    void* param[ADAMW_MAX];
    float* m[ADAMW_MAX];
    float* v[ADAMW_MAX];
    float* vmax[ADAMW_MAX];    // null without amsgrad
    mc_i64 n[ADAMW_MAX];
    mc_i64 first_block[ADAMW_MAX + 1];
    mc_i64 count;
    double sign, decay, beta1, beta2, step_size, inv_bc2_sqrt, eps;
};

template <class D> __device__ void adamw_step(const AdamWBatch& b) {
    typedef typename D::T T;
    mc_i64 blk = MC_BLOCK;
    int t = 0;
    while (t + 1 < b.count && b.first_block[t + 1] <= blk) t++;
    mc_i64 lo = (blk - b.first_block[t]) * ADAMW_CHUNK, hi = lo + ADAMW_CHUNK;
    if (hi > b.n[t]) hi = b.n[t];
    const T* g = (const T*)b.grad[t];
    T* p = (T*)b.param[t];
    float *m = b.m[t], *v = b.v[t], *vmax = b.vmax[t];
    float sign = (float)b.sign, decay = (float)b.decay, b1 = (float)b.beta1, b2 = (float)b.beta2;
    float lr = (float)b.step_size, inv = (float)b.inv_bc2_sqrt, eps = (float)b.eps;
    for (mc_i64 i = lo + MC_TID; i < hi; i += MC_NTHREADS) {
        float gi = sign * D::load(g + i);
        float mi = m[i] + (1.f - b1) * (gi - m[i]);
        float vi = b2 * v[i] + (1.f - b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        if (vmax) {
            vi = fmaxf(vmax[i], vi);
            vmax[i] = vi;
        }
        float pi = D::load(p + i) * decay - lr * mi / (sqrtf(vi) * inv + eps);
        D::store(p + i, pi);
    }
}
MC_INSTANTIATE(adamw_step, (const AdamWBatch b), (b))
