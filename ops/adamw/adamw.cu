// Multi-tensor AdamW: one launch steps up to ADAMW_MAX tensors whose
// pointers and sizes travel inline, within what the backend passes so
// (MC_INLINE_BYTES: CUDA 12.1+ takes up to 32 KB of kernel parameters on
// sm_70 and later, 512 tensors are about 28 KB; Metal's setBytes takes
// 4 KB, 64 tensors are 3,680 bytes). Block b steps elements
// [chunk*ADAMW_CHUNK, ...) of the tensor whose block range holds b.
#define ADAMW_MAX (MC_INLINE_BYTES > 4096 ? 512 : 64)
#define ADAMW_CHUNK 4096
// The step's scalars, each formed in double precision on the host and
// rounded once (ops/adamw: scalars).
struct AdamWScalars {
    float sign, decay, one_minus_beta1, beta2, one_minus_beta2, step_size, bc2_sqrt, eps;
};
struct AdamWBatch {  // 8-byte words: the Go side writes words
    MC_GLOBAL const void* grad[ADAMW_MAX];
    MC_GLOBAL void* param[ADAMW_MAX];
    MC_GLOBAL float* m[ADAMW_MAX];
    MC_GLOBAL float* v[ADAMW_MAX];
    MC_GLOBAL float* vmax[ADAMW_MAX];  // null without amsgrad
    mc_i64 n[ADAMW_MAX];
    mc_i64 first_block[ADAMW_MAX + 1];
    mc_i64 count;
    MC_GLOBAL const float* grad_scale;  // null, or the gradients' scale (divided out)
    MC_GLOBAL const float* found_inf;   // null, or nonzero to skip the step
    AdamWScalars h;
    // capturable steps: tensor t's step number is steps[t] (and lr *lr, or
    // lr_value where lr is null), read here; null steps: h is complete
    MC_GLOBAL const float* steps;
    MC_GLOBAL const float* lr;
    float lr_value, weight_decay, beta1, beta2;
};

// The scalars that depend on the step number and lr, formed on the device
// in float32 as PyTorch's capturable AdamW forms them.
MC_DEVICE void adamw_device_scalars(MC_THREAD AdamWScalars& h, MC_CONSTANT const AdamWBatch& b, int t) {
    float lr = b.lr ? *b.lr : b.lr_value, step = b.steps[t];
    h.decay = 1.f - lr * b.weight_decay;
    h.step_size = lr / (1.f - powf(b.beta1, step));
    h.bc2_sqrt = sqrtf(1.f - powf(b.beta2, step));
}

// one element of the step (m, v and, with amsgrad, vmax updated in place;
// returns the param), PyTorch's expressions in its order
MC_DEVICE float adamw_elem(float p, float g, MC_THREAD float& m, MC_THREAD float& v, bool amsgrad,
                           MC_THREAD float& vmax, MC_THREAD const AdamWScalars& h) {
    g *= h.sign;
    m += h.one_minus_beta1 * (g - m);
    v = h.beta2 * v + h.one_minus_beta2 * g * g;
    float vi = v;
    if (amsgrad) {
        vi = fmaxf(vmax, vi);
        vmax = vi;
    }
    return p * h.decay - h.step_size * m / (sqrtf(vi) / h.bc2_sqrt + h.eps);
}

template <class D> MC_DEVICE void adamw_step(MC_IDS, MC_CONSTANT const AdamWBatch& b) {
    typedef typename D::T T;
    mc_i64 blk = MC_BLOCK;
    int t = 0, hi_t = (int)b.count - 1;  // the last tensor whose first block <= blk
    while (t < hi_t) {
        int mid = (t + hi_t + 1) / 2;
        if (b.first_block[mid] <= blk) t = mid;
        else hi_t = mid - 1;
    }
    mc_i64 lo = (blk - b.first_block[t]) * ADAMW_CHUNK, hi = lo + ADAMW_CHUNK;
    if (hi > b.n[t]) hi = b.n[t];
    MC_GLOBAL const T* g = (MC_GLOBAL const T*)b.grad[t];
    MC_GLOBAL T* p = (MC_GLOBAL T*)b.param[t];
    MC_GLOBAL float *m = b.m[t], *v = b.v[t], *vmax = b.vmax[t];
    if (b.found_inf && *b.found_inf != 0.f) return;  // an inf or NaN gradient: no update
    // the table's scalars, copied field by field (a struct's implicit copy
    // takes it by a reference of no particular address space)
    AdamWScalars h = {b.h.sign,     b.h.decay, b.h.one_minus_beta1, b.h.beta2, b.h.one_minus_beta2, b.h.step_size,
                      b.h.bc2_sqrt, b.h.eps};
    if (b.steps) adamw_device_scalars(h, b, t);
    if (b.grad_scale) h.sign /= *b.grad_scale;
    // four elements per thread with 16-byte state accesses where every
    // pointer allows it (chunks start at multiples of 4096 elements)
    bool vec = ((mc_u64)m | (mc_u64)v | (mc_u64)vmax) % 16 == 0 && ((mc_u64)p | (mc_u64)g) % (4 * sizeof(T)) == 0;
    mc_i64 i = lo + MC_TID;
    if (vec) {
        for (i = lo + 4 * MC_TID; i + 3 < hi; i += 4 * MC_NTHREADS) {
            float mm[4], vv[4], xx[4];
            Vec<F32>::load(m + i, mm);
            Vec<F32>::load(v + i, vv);
            if (vmax) Vec<F32>::load(vmax + i, xx);
            T pv[4], gv[4];
            if (sizeof(T) == 4) {
                *(MC_THREAD uint4*)pv = *(MC_GLOBAL const uint4*)(p + i);
                *(MC_THREAD uint4*)gv = *(MC_GLOBAL const uint4*)(g + i);
            } else {
                *(MC_THREAD uint2*)pv = *(MC_GLOBAL const uint2*)(p + i);
                *(MC_THREAD uint2*)gv = *(MC_GLOBAL const uint2*)(g + i);
            }
#pragma unroll
            for (int j = 0; j < 4; j++)
                pv[j] = D::pack(adamw_elem(D::unpack(pv[j]), D::unpack(gv[j]), mm[j], vv[j], vmax != 0, xx[j], h));
            Vec<F32>::store(m + i, mm);
            Vec<F32>::store(v + i, vv);
            if (vmax) Vec<F32>::store(vmax + i, xx);
            if (sizeof(T) == 4) *(MC_GLOBAL uint4*)(p + i) = *(MC_THREAD uint4*)pv;
            else *(MC_GLOBAL uint2*)(p + i) = *(MC_THREAD uint2*)pv;
        }
        // the last hi - lo % 4 elements, if any, one per thread
        mc_i64 rest = lo + (hi - lo) / 4 * 4;
        i = rest + MC_TID;
    }
    for (; i < hi; i += MC_NTHREADS) {
        float mi = m[i], vi = v[i], xi = vmax ? vmax[i] : 0.f;
        D::store(p + i, adamw_elem(D::load(p + i), D::load(g + i), mi, vi, vmax != 0, xi, h));
        m[i] = mi;
        v[i] = vi;
        if (vmax) vmax[i] = xi;
    }
}
MC_INSTANTIATE(adamw_step, (const AdamWBatch b), (b))
