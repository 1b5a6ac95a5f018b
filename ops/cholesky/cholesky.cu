// Batched Cholesky, a block per matrix held in shared memory as float32
// (row stride n + 1, so that a column's entries fall in different banks).
// Right-looking without square roots: step j subtracts s_ij s_kj / s_jj
// from the trailing lower triangle, leaving column j as it was, so one
// barrier a step suffices; the factor is l_ij = s_ij / sqrt(s_jj),
// formed as it is written out.
template <class D>
MC_DEVICE void cholesky(MC_IDS, MC_GROUP float4* S4, MC_GLOBAL const void* a_, MC_GLOBAL void* l_, MC_GLOBAL int* info,
                        int n, int upper) {
    typedef typename D::T T;
    MC_GROUP float* S = (MC_GROUP float*)S4;  // declared as the other kernels' dynamic memory is
    int ld = n + 1, nn = n * n;
    mc_i64 b = MC_BLOCK;
    MC_GLOBAL const T* a = (MC_GLOBAL const T*)a_ + b * nn;
    MC_GLOBAL T* l = (MC_GLOBAL T*)l_ + b * nn;
    // the lower triangle, or the upper one transposed, read in a's order
    for (int e = MC_TID; e < nn; e += MC_NTHREADS) {
        int r = e / n, c = e - r * n;
        if (upper ? c >= r : c <= r) S[upper ? c * ld + r : r * ld + c] = D::load(a + e);
    }
    MC_BARRIER();
    int fail = 0;
    for (int j = 0; j < n; j++) {
        float d = S[j * ld + j];  // every thread reads the same: a uniform branch
        if (!(d > 0.f)) {         // not positive, or NaN
            fail = j + 1;
            break;
        }
        float inv = 1.f / d;
        int m = n - j - 1;
        for (int e = MC_TID; e < m * m; e += MC_NTHREADS) {
            int ii = e / m, kk = e - ii * m;
            if (kk <= ii) {
                int i = j + 1 + ii, k = j + 1 + kk;
                S[i * ld + k] = fmaf(-S[i * ld + j] * inv, S[k * ld + j], S[i * ld + k]);
            }
        }
        MC_BARRIER();
    }
    if (MC_TID == 0) info[b] = fail;
    for (int e = MC_TID; e < nn; e += MC_NTHREADS) {
        int r = e / n, c = e - r * n;
        int i = upper ? c : r, j = upper ? r : c;  // the factor's entry (i, j), j <= i
        D::store(l + e, j <= i ? S[i * ld + j] / sqrtf(S[j * ld + j]) : 0.f);
    }
}
MC_INSTANTIATE_DYNAMIC(cholesky, float4, ,
                       (MC_GLOBAL const void* a, MC_GLOBAL void* l, MC_GLOBAL int* info, int n, int upper),
                       (a, l, info, n, upper))
