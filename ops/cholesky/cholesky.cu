// Batched Cholesky, a block per matrix held in shared memory as float32
// (row stride n + 1, so that a column's entries fall in different banks).
// Right-looking without square roots, by panels of 8 columns: within the
// panel, step j subtracts s_ij s_kj / s_jj from the panel's later columns
// (one barrier a column), then the trailing triangle takes the whole
// panel's 8 products at once (one barrier a panel); column j is left as
// it was, and the factor is l_ij = s_ij / sqrt(s_jj), formed as it is
// written out.
#define CHOL_PANEL 8
template <class D>
MC_DEVICE void cholesky(MC_IDS, MC_GROUP float4* S4, MC_GLOBAL const void* a_, MC_GLOBAL void* l_, MC_GLOBAL int* info,
                        int n, int upper, int) {
    typedef typename D::T T;
    MC_GROUP float* S = (MC_GROUP float*)S4;  // declared as the other kernels' dynamic memory is
    int ld = n + 1, nn = n * n, tx = MC_TID & 31, ty = MC_TID >> 5, ny = MC_NTHREADS >> 5;
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
    for (int p0 = 0; p0 < n && fail == 0; p0 += CHOL_PANEL) {
        int p1 = p0 + CHOL_PANEL < n ? p0 + CHOL_PANEL : n;
        for (int j = p0; j < p1; j++) {
            float d = S[j * ld + j];  // every thread reads the same: a uniform branch
            if (!(d > 0.f)) {         // not positive, or NaN
                fail = j + 1;
                break;
            }
            // the panel's later columns, a thread a (row, column)
            float inv = 1.f / d;
            int k = j + 1 + (MC_TID & (CHOL_PANEL - 1));
            for (int i = j + 1 + MC_TID / CHOL_PANEL; i < n; i += MC_NTHREADS / CHOL_PANEL)
                if (k < p1 && k <= i) S[i * ld + k] = fmaf(-S[i * ld + j] * inv, S[k * ld + j], S[i * ld + k]);
            MC_BARRIER();
        }
        if (fail != 0) break;
        // the trailing triangle: a warp a row, lanes on consecutive columns
        float inv[CHOL_PANEL];
#pragma unroll
        for (int q = 0; q < CHOL_PANEL; q++) inv[q] = p0 + q < p1 ? 1.f / S[(p0 + q) * ld + p0 + q] : 0.f;
        for (int i = p1 + ty; i < n; i += ny) {
            float si[CHOL_PANEL];
#pragma unroll
            for (int q = 0; q < CHOL_PANEL; q++) si[q] = p0 + q < p1 ? S[i * ld + p0 + q] * inv[q] : 0.f;
            for (int k = p1 + tx; k <= i; k += 32) {
                float acc = S[i * ld + k];
#pragma unroll
                for (int q = 0; q < CHOL_PANEL; q++)
                    if (p0 + q < p1) acc = fmaf(-si[q], S[k * ld + p0 + q], acc);
                S[i * ld + k] = acc;
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
                       (MC_GLOBAL const void* a, MC_GLOBAL void* l, MC_GLOBAL int* info, int n, int upper, int batch),
                       (a, l, info, n, upper, batch))

// Orders up to 32: a warp per matrix, lane i holding row i of the lower
// triangle in registers (the loops unrolled, so every index is constant);
// column j's entries reach the other lanes by shuffles. The matrix moves
// between memory and registers through the warp's part of shared memory
// (row stride 33: a lane's row is conflict-free), so that the device reads
// and writes it in whole lines.
template <class D>
MC_DEVICE void cholesky_warp(MC_IDS, MC_GROUP float4* S4, MC_GLOBAL const void* a_, MC_GLOBAL void* l_,
                             MC_GLOBAL int* info, int n, int upper, int batch) {
    typedef typename D::T T;
    int lane = MC_TID & 31, nn = n * n;
    mc_i64 b = (mc_i64)MC_BLOCK * (MC_NTHREADS >> 5) + (MC_TID >> 5);
    if (b >= batch) return;  // the whole warp: nothing below waits for the others
    MC_GROUP float* S = (MC_GROUP float*)S4 + (MC_TID >> 5) * 32 * 33;
    MC_GLOBAL const T* a = (MC_GLOBAL const T*)a_ + b * nn;
    MC_GLOBAL T* l = (MC_GLOBAL T*)l_ + b * nn;
    for (int e = lane; e < nn; e += 32) {
        int i = e / n, k = e - i * n;
        S[i * 33 + k] = D::load(a + e);
    }
    MC_WARP_BARRIER();
    bool row = lane < n;
    float r[32];
#pragma unroll
    for (int k = 0; k < 32; k++) r[k] = row && k <= lane ? S[upper ? k * 33 + lane : lane * 33 + k] : 0.f;
    int fail = 0;
#pragma unroll
    for (int j = 0; j < 32; j++) {
        if (j >= n) break;
        float d = mc_shfl(r[j], j);
        if (fail == 0 && !(d > 0.f)) fail = j + 1;  // not positive, or NaN
        r[j] /= sqrtf(d);                           // lane j: sqrt(d); above it, zeros stay
#pragma unroll
        for (int k = j + 1; k < 32; k++) {
            if (k >= n) break;
            float lkj = mc_shfl(r[j], k);
            if (k <= lane) r[k] = fmaf(-r[j], lkj, r[k]);
        }
    }
    if (lane == 0) info[b] = fail;
    MC_WARP_BARRIER();  // every lane has read its row
    if (row)
#pragma unroll
        for (int k = 0; k < 32; k++)
            if (k < n) S[upper ? k * 33 + lane : lane * 33 + k] = r[k];
    MC_WARP_BARRIER();
    for (int e = lane; e < nn; e += 32) {
        int i = e / n, k = e - i * n;
        D::store(l + e, S[i * 33 + k]);
    }
}
MC_INSTANTIATE_DYNAMIC(cholesky_warp, float4, ,
                       (MC_GLOBAL const void* a, MC_GLOBAL void* l, MC_GLOBAL int* info, int n, int upper, int batch),
                       (a, l, info, n, upper, batch))
