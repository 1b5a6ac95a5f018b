// Rotary position embedding, rotate_half form, and the rotation's transpose
// for the backward. A thread takes one 16-byte piece of a row's first half
// and the matching piece of its second half (N pairs (j, j + D/2)), so a
// block covers several rows (b, h, t) of x with whole-vector loads; a row
// whose halves are not 16-byte aligned, or whose half is not a multiple of
// N, goes element by element with the same layout.
template <class D>
MC_DEVICE void rope(MC_IDS, MC_GLOBAL const void* x_, mc_i64 xsb, mc_i64 xsh, mc_i64 xst, MC_GLOBAL const void* c_,
                    mc_i64 csb, mc_i64 cst, MC_GLOBAL const void* s_, mc_i64 ssb, mc_i64 sst, MC_GLOBAL void* y_,
                    mc_i64 ysb, mc_i64 ysh, mc_i64 yst, int h, int t, int pairs, int backward, int rows) {
    typedef typename D::T T;
    enum { N = Vec<D>::N };
    // 32-bit indices (the launch checks that rows and pieces fit): 64-bit
    // division is a long software sequence on the GPU
    int per = (pairs + N - 1) / N;  // pieces a half
    int item = (int)MC_BLOCK * MC_NTHREADS + MC_TID, r = item / per;
    if (r >= rows) return;
    int at = (item - r * per) * N;
    int bh = r / t, b = bh / h;
    int tt = r - bh * t, hh = bh - b * h;
    MC_GLOBAL const T* x = (MC_GLOBAL const T*)x_ + b * xsb + hh * xsh + tt * xst;
    MC_GLOBAL const T* c = (MC_GLOBAL const T*)c_ + b * csb + tt * cst;
    MC_GLOBAL const T* s = (MC_GLOBAL const T*)s_ + b * ssb + tt * sst;
    MC_GLOBAL T* y = (MC_GLOBAL T*)y_ + b * ysb + hh * ysh + tt * yst;
    bool vec = mc_aligned(x, pairs, N) && mc_aligned(c, pairs, N) && mc_aligned(s, pairs, N) && mc_aligned(y, pairs, N);
    float x1[N], x2[N], c1[N], c2[N], s1[N], s2[N];
    mc_fetch<D>(x, pairs, vec, at, x1);
    mc_fetch<D>(x + pairs, pairs, vec, at, x2);
    mc_fetch<D>(c, pairs, vec, at, c1);
    mc_fetch<D>(c + pairs, pairs, vec, at, c2);
    mc_fetch<D>(s, pairs, vec, at, s1);
    mc_fetch<D>(s + pairs, pairs, vec, at, s2);
    float y1[N], y2[N];
#pragma unroll
    for (int j = 0; j < N; j++) {
        if (backward) {
            y1[j] = x1[j] * c1[j] + x2[j] * s2[j];
            y2[j] = x2[j] * c2[j] - x1[j] * s1[j];
        } else {
            y1[j] = x1[j] * c1[j] - x2[j] * s1[j];
            y2[j] = x2[j] * c2[j] + x1[j] * s2[j];
        }
    }
    mc_store<D>(y, pairs, vec, at, y1);
    mc_store<D>(y + pairs, pairs, vec, at, y2);
}
MC_INSTANTIATE(rope,
               (MC_GLOBAL const void* x, mc_i64 xsb, mc_i64 xsh, mc_i64 xst, MC_GLOBAL const void* c, mc_i64 csb,
                mc_i64 cst, MC_GLOBAL const void* s, mc_i64 ssb, mc_i64 sst, MC_GLOBAL void* y, mc_i64 ysb, mc_i64 ysh,
                mc_i64 yst, int h, int t, int pairs, int backward, int rows),
               (x, xsb, xsh, xst, c, csb, cst, s, ssb, sst, y, ysb, ysh, yst, h, t, pairs, backward, rows))
