// Batched solution of A X = B by Gaussian elimination with partial
// pivoting, in float32. A pivot is the largest magnitude left in its column
// (a NaN counts as the largest, so that it reaches every result), the first
// such row on ties; a zero pivot stops the matrix (info = its index + 1,
// X = NaN).

// (v, p) of the warp with the largest v, the smallest p on ties, on every
// lane
MC_DEVICE void solve_argmax(MC_THREAD float& v, MC_THREAD int& p) {
    for (int o = 16; o > 0; o >>= 1) {
        float v2 = mc_shfl_xor(v, o);
        int p2 = mc_shfl_xor(p, o);
        if (v2 > v || (v2 == v && p2 < p)) {
            v = v2;
            p = p2;
        }
    }
}
MC_DEVICE float solve_magnitude(float v) {
    v = fabsf(v);
    return v <= mc_inf() ? v : mc_inf();  // NaN: the largest
}

// Orders up to W (32, or 16) with up to SOLVE_K right-hand sides: a warp per
// system, lane i holding row i of A and of B in registers (the step and
// column loops unrolled, so every index is constant).
// Gauss-Jordan with the rows left in place: step j's pivot is the largest
// magnitude in column j among the rows that have not given one yet (the
// first such row on ties), and every other row subtracts its multiple of
// the pivot row, which reaches the lanes by shuffles. At the end the row
// that gave step j's pivot holds x_j times it. A and B come in, X goes out
// through the warp's part of shared memory (row stride SOLVE_LD), so that
// the device reads and writes whole lines.
#define SOLVE_K 8
#define SOLVE_LD 41
template <class D, int W>
MC_DEVICE void solve_warp_rows(MC_IDS, MC_GROUP float4* S4, MC_GLOBAL const void* a_, MC_GLOBAL const void* b_,
                               MC_GLOBAL void* x_, MC_GLOBAL int* info, int n, int k, int batch) {
    typedef typename D::T T;
    int lane = MC_TID & 31, nn = n * n, nk = n * k;
    mc_i64 b = (mc_i64)MC_BLOCK * (MC_NTHREADS >> 5) + (MC_TID >> 5);
    if (b >= batch) return;  // the whole warp: nothing below waits for the others
    MC_GROUP float* S = (MC_GROUP float*)S4 + (MC_TID >> 5) * 32 * SOLVE_LD;
    MC_GLOBAL const T* a = (MC_GLOBAL const T*)a_ + b * nn;
    MC_GLOBAL const T* bb = (MC_GLOBAL const T*)b_ + b * nk;
    MC_GLOBAL T* x = (MC_GLOBAL T*)x_ + b * nk;
    for (int e = lane; e < nn; e += 32) {
        int i = e / n;
        S[i * SOLVE_LD + e - i * n] = D::load(a + e);
    }
    for (int e = lane; e < nk; e += 32) {
        int i = e / k;
        S[i * SOLVE_LD + 32 + e - i * k] = D::load(bb + e);
    }
    MC_WARP_BARRIER();
    bool row = lane < n, used = false;
    float r[W], y[SOLVE_K];
#pragma unroll
    for (int c = 0; c < W; c++) r[c] = row && c < n ? S[lane * SOLVE_LD + c] : 0.f;
#pragma unroll
    for (int c = 0; c < SOLVE_K; c++) y[c] = row && c < k ? S[lane * SOLVE_LD + 32 + c] : 0.f;
    MC_WARP_BARRIER();     // every lane has its row: S is free for X
    int fail = 0, at = 0;  // at: the step whose pivot this row gave
    // (a step shuffles and updates only the columns right of its own)
#pragma unroll
    for (int j = 0; j < W; j++) {
        if (j >= n) break;
        float rj = r[j];
        float v = row && !used ? solve_magnitude(rj) : -1.f;
        int p = lane;
        solve_argmax(v, p);
        float pivot = mc_shfl(rj, p);  // the same p on every lane: a uniform branch
        if (pivot == 0.f) {
            fail = j + 1;
            break;
        }
        if (lane == p) used = true, at = j;
        float f = row && lane != p ? rj * (1.f / pivot) : 0.f;
#pragma unroll
        for (int c = j + 1; c < W; c++) r[c] = fmaf(-f, mc_shfl(r[c], p), r[c]);
#pragma unroll
        for (int c = 0; c < SOLVE_K; c++)
            if (c < k) y[c] = fmaf(-f, mc_shfl(y[c], p), y[c]);
    }
    float d = 1.f, nan = mc_inf() - mc_inf();
#pragma unroll
    for (int c = 0; c < W; c++) d = c == at ? r[c] : d;
    int to = fail != 0 ? lane : at;  // a singular system's rows gave no full permutation
    if (row)
#pragma unroll
        for (int c = 0; c < SOLVE_K; c++)
            if (c < k) S[to * SOLVE_LD + c] = fail != 0 ? nan : y[c] / d;
    if (lane == 0) info[b] = fail;
    MC_WARP_BARRIER();
    for (int e = lane; e < nk; e += 32) {
        int i = e / k;
        D::store(x + e, S[i * SOLVE_LD + e - i * k]);
    }
}

// row widths: 32, and 16 for orders up to 16 (half the work a step)
template <class D>
MC_DEVICE void solve_warp(MC_IDS, MC_GROUP float4* S4, MC_GLOBAL const void* a, MC_GLOBAL const void* b,
                          MC_GLOBAL void* x, MC_GLOBAL int* info, int n, int k, int batch) {
    solve_warp_rows<D, 32>(id, S4, a, b, x, info, n, k, batch);
}
template <class D>
MC_DEVICE void solve_warp16(MC_IDS, MC_GROUP float4* S4, MC_GLOBAL const void* a, MC_GLOBAL const void* b,
                            MC_GLOBAL void* x, MC_GLOBAL int* info, int n, int k, int batch) {
    solve_warp_rows<D, 16>(id, S4, a, b, x, info, n, k, batch);
}
MC_INSTANTIATE_DYNAMIC(solve_warp16, float4, ,
                       (MC_GLOBAL const void* a, MC_GLOBAL const void* b, MC_GLOBAL void* x, MC_GLOBAL int* info, int n,
                        int k, int batch),
                       (a, b, x, info, n, k, batch))
MC_INSTANTIATE_DYNAMIC(solve_warp, float4, ,
                       (MC_GLOBAL const void* a, MC_GLOBAL const void* b, MC_GLOBAL void* x, MC_GLOBAL int* info, int n,
                        int k, int batch),
                       (a, b, x, info, n, k, batch))

// Larger systems: a block per matrix, [A | B] in shared memory (row stride
// n + k, then the pivot's row index); warp 0 finds each pivot, the block
// swaps, eliminates and substitutes back, a barrier a step.
template <class D>
MC_DEVICE void solve_block(MC_IDS, MC_GROUP float4* S4, MC_GLOBAL const void* a_, MC_GLOBAL const void* b_,
                           MC_GLOBAL void* x_, MC_GLOBAL int* info, int n, int k, int) {
    typedef typename D::T T;
    MC_GROUP float* S = (MC_GROUP float*)S4;
    int m = n + k, nn = n * n, nk = n * k, lane = MC_TID & 31;
    MC_GROUP int* piv = (MC_GROUP int*)(S + n * m);
    mc_i64 b = MC_BLOCK;
    MC_GLOBAL const T* a = (MC_GLOBAL const T*)a_ + b * nn;
    MC_GLOBAL const T* bb = (MC_GLOBAL const T*)b_ + b * nk;
    MC_GLOBAL T* x = (MC_GLOBAL T*)x_ + b * nk;
    for (int e = MC_TID; e < nn; e += MC_NTHREADS) {
        int i = e / n;
        S[i * m + e - i * n] = D::load(a + e);
    }
    for (int e = MC_TID; e < nk; e += MC_NTHREADS) {
        int i = e / k;
        S[i * m + n + e - i * k] = D::load(bb + e);
    }
    MC_BARRIER();
    int fail = 0;
    for (int j = 0; j < n; j++) {
        if (MC_TID < 32) {
            float v = -1.f;
            int p = n;
            for (int i = j + lane; i < n; i += 32) {
                float t = solve_magnitude(S[i * m + j]);
                if (t > v) {
                    v = t;
                    p = i;
                }
            }
            solve_argmax(v, p);
            if (lane == 0) piv[0] = p;
        }
        MC_BARRIER();
        int p = piv[0];
        float pivot = S[p * m + j];  // every thread reads the same: a uniform branch
        if (pivot == 0.f) {
            fail = j + 1;
            break;
        }
        if (p != j)
            for (int c = j + MC_TID; c < m; c += MC_NTHREADS) {
                float t = S[j * m + c];
                S[j * m + c] = S[p * m + c];
                S[p * m + c] = t;
            }
        MC_BARRIER();
        float inv = 1.f / S[j * m + j];
        int w = m - j - 1;
        for (int e = MC_TID; e < (n - j - 1) * w; e += MC_NTHREADS) {
            int i = j + 1 + e / w, c = j + 1 + e % w;
            S[i * m + c] = fmaf(-S[i * m + j] * inv, S[j * m + c], S[i * m + c]);
        }
        MC_BARRIER();
    }
    for (int i = n - 1; i >= 0 && fail == 0; i--) {
        float d = S[i * m + i];
        for (int c = MC_TID; c < k; c += MC_NTHREADS) S[i * m + n + c] /= d;
        MC_BARRIER();
        for (int e = MC_TID; e < i * k; e += MC_NTHREADS) {
            int r = e / k, c = n + e % k;
            S[r * m + c] = fmaf(-S[r * m + i], S[i * m + c], S[r * m + c]);
        }
        MC_BARRIER();
    }
    if (MC_TID == 0) info[b] = fail;
    float nan = mc_inf() - mc_inf();
    for (int e = MC_TID; e < nk; e += MC_NTHREADS) {
        int i = e / k;
        D::store(x + e, fail != 0 ? nan : S[i * m + n + e - i * k]);
    }
}
MC_INSTANTIATE_DYNAMIC(solve_block, float4, ,
                       (MC_GLOBAL const void* a, MC_GLOBAL const void* b, MC_GLOBAL void* x, MC_GLOBAL int* info, int n,
                        int k, int batch),
                       (a, b, x, info, n, k, batch))
