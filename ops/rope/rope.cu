// Rotary position embedding, rotate_half form: one block a row (b, h, t) of
// x, each thread a pair (j, j + D/2) of it; the rotation's transpose for
// the backward.
template <class D>
MC_DEVICE void rope(MC_IDS, MC_GLOBAL const void* x_, mc_i64 xsb, mc_i64 xsh, mc_i64 xst, MC_GLOBAL const void* c_,
                    mc_i64 csb, mc_i64 cst, MC_GLOBAL const void* s_, mc_i64 ssb, mc_i64 sst, MC_GLOBAL void* y_, int h,
                    int t, int pairs, int backward) {
    typedef typename D::T T;
    mc_i64 r = MC_BLOCK, bh = r / t, b = bh / h;
    mc_i64 tt = r - bh * t, hh = bh - b * h;
    MC_GLOBAL const T* x = (MC_GLOBAL const T*)x_ + b * xsb + hh * xsh + tt * xst;
    MC_GLOBAL const T* c = (MC_GLOBAL const T*)c_ + b * csb + tt * cst;
    MC_GLOBAL const T* s = (MC_GLOBAL const T*)s_ + b * ssb + tt * sst;
    MC_GLOBAL T* y = (MC_GLOBAL T*)y_ + r * 2 * pairs;
    for (int j = MC_TID; j < pairs; j += MC_NTHREADS) {
        float x1 = D::load(x + j), x2 = D::load(x + j + pairs), c1 = D::load(c + j), c2 = D::load(c + j + pairs);
        float s1 = D::load(s + j), s2 = D::load(s + j + pairs);
        if (backward) {
            D::store(y + j, x1 * c1 + x2 * s2);
            D::store(y + j + pairs, x2 * c2 - x1 * s1);
        } else {
            D::store(y + j, x1 * c1 - x2 * s1);
            D::store(y + j + pairs, x2 * c2 + x1 * s2);
        }
    }
}
MC_INSTANTIATE(rope,
               (MC_GLOBAL const void* x, mc_i64 xsb, mc_i64 xsh, mc_i64 xst, MC_GLOBAL const void* c, mc_i64 csb,
                mc_i64 cst, MC_GLOBAL const void* s, mc_i64 ssb, mc_i64 sst, MC_GLOBAL void* y, int h, int t, int pairs,
                int backward),
               (x, xsb, xsh, xst, c, csb, cst, s, ssb, sst, y, h, t, pairs, backward))
