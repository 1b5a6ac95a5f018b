// Batched symmetric eigendecomposition by parallel cyclic Jacobi: a matrix
// (its upper triangle) in shared memory (row stride eigh_ld); up to order
// 32 a warp per matrix (eigh_warp16: two a warp, eigh_warp24 and eigh_warp:
// one; several a block), each lane holding its row of V in registers; a
// block per matrix above (eigh), V in shared memory. A sweep is the
// players - 1 steps of the round-robin tournament over the n indices
// (rounded up to even: the extra one a bye), each step rotating its
// disjoint pairs at once in two phases: each pair's thread chooses its
// rotation (none where a_pq is zero or negligible beside both diagonal
// entries) and diagonalizes its own 2 x 2 block; then every 2 x 2 block
// between two pairs (k < k', in the upper triangle) takes both rotations,
// J_kᵀ B J_k', and every row of V its pairs' rotations. The sweeps end
// after one whose rotations all had tangents at most EIGH_STOP_TAN
// (simd.EighStopTan, 2^-12: convergence is quadratic, and what is left off
// the diagonal is about their squares). The eigenvalues leave ranked
// (ascending, NaN last, ties by index) with their columns of V.
#define EIGH_MAX_SWEEPS 40
#define EIGH_STOP_TAN 0.000244140625f
#define EIGH_WARPS 4

MC_DEVICE bool eigh_before(float x, float y) { return x < y || (y != y && x == x); }

// A's row stride in shared memory (and V's, where it is there): n + 1 in
// the block's kernel, which keeps V's rows and columns free of bank
// conflicts; in a warp's, where a step's accesses go to its pairs' and
// pairs of pairs' entries, the stride whose words for them share banks
// least, counted over a sweep (bench/linalg-tuning.md; ops/eigh/gpu.go's
// rowStride).
template <int REG> MC_DEVICE int eigh_ld(int n) { return REG == 32 ? 38 : REG == 24 ? 26 : REG == 16 ? 22 : n + 1; }

// The lanes a warp's kernel gives a matrix: REG where two matrices share
// a warp (REG 16), else the warp's 32 (those past REG hold no row).
template <int REG> MC_DEVICE int eigh_lanes() { return REG == 16 ? 16 : 32; }

// The floats of shared memory one matrix takes: A and, in shared memory,
// V (n rows of ld each), each pair's cosine, two sines and indices, the
// ranks, the pairs of pairs, and mc_block_sum's scratch (ops/eigh/gpu.go's
// matrixBytes).
MC_DEVICE int eigh_floats(int n, int ld, bool shared_v, int pairs) {
    return n * ld * (shared_v ? 2 : 1) + 5 * pairs + n + pairs * (pairs - 1) / 2 + MC_BLOCK_SUM_SCRATCH;
}

template <bool WARP> MC_DEVICE void eigh_sync() {
    if (WARP) MC_WARP_BARRIER();
    else MC_BARRIER();
}

// The sum over a matrix's threads: its lanes (a warp, or half of one), or
// the block's (REG 0).
template <int REG> MC_DEVICE float eigh_sum(MC_IDS, float v, MC_GROUP float* scratch) {
    return REG > 0 ? mc_group_sum(v, eigh_lanes<REG>()) : mc_block_sum(id, v, scratch);
}

// The tournament's players for a matrix of order n: REG where V is in
// registers (a warp's kernel: REG - n byes), else n rounded up to even.
template <int REG> MC_DEVICE int eigh_players(int n) { return REG > 0 ? REG : 2 * ((n + 1) / 2); }

// Matrix b of a, its shared memory at M, by threads t of nt: the block
// (REG 0), or a warp (REG 16, 24 or 32 players, lane t keeping row t of V in
// vr, slot j the column of the index at tournament position j: a step's
// pair k is slots k and REG - 1 - k, and the slots turn as the positions
// do, back to the identity at the end of a sweep).
template <class D, int REG>
MC_DEVICE void eigh_matrix(MC_IDS, int t, int nt, MC_GROUP float* M, MC_GLOBAL const void* a_, MC_GLOBAL void* w_,
                           MC_GLOBAL void* v_, MC_GLOBAL int* info, int n, int upper, int vectors, mc_i64 b,
                           bool live) {
    typedef typename D::T T;
    const bool WARP = REG > 0;
    int ld = eigh_ld<REG>(n), nn = n * n, players = eigh_players<REG>(n), pairs = players / 2,
        blocks = pairs * (pairs - 1) / 2;
    bool shared_v = vectors && !WARP;
    MC_GROUP float* A = M;
    MC_GROUP float* V = A + n * ld;
    MC_GROUP float* C = V + (shared_v ? n * ld : 0);
    MC_GROUP float* S = C + pairs;
    MC_GROUP float* SO = S + pairs;                 // the sine for the pair's slots in the order k, REG - 1 - k
    MC_GROUP int* P = (MC_GROUP int*)(SO + pairs);  // each pair's indices this step
    MC_GROUP int* Q = P + pairs;
    MC_GROUP int* rank = Q + pairs;
    MC_GROUP int* K = rank + n;  // block e's pairs (k, k2), k < k2, as k | k2 << 16
    MC_GROUP float* scratch = (MC_GROUP float*)(K + blocks);
    MC_GLOBAL const T* a = (MC_GLOBAL const T*)a_ + (live ? b : 0) * nn;
    float bad = 0.f, inv_n = 1.f / (float)n;
    for (int e = t; e < nn; e += nt) {
        int r = e / n, c = e - r * n;
        if (upper ? c >= r : c <= r) {
            float x = live ? D::load(a + e) : 0.f;
            A[upper ? r * ld + c : c * ld + r] = x;
            if (!(x * 0.f == 0.f)) bad = 1.f;  // NaN or infinite
        }
        if (shared_v) V[r * ld + c] = r == c ? 1.f : 0.f;
    }
    float vr[REG > 0 ? REG : 1];
#pragma unroll
    for (int j = 0; j < (REG > 0 ? REG : 1); j++) vr[j] = t == j ? 1.f : 0.f;
    for (int e = t; e < blocks; e += nt) {  // e = k2 (k2 - 1) / 2 + k
        int k2 = (int)((1.f + sqrtf(1.f + 8.f * (float)e)) * 0.5f);
        if (k2 * (k2 - 1) / 2 > e) k2--;
        if ((k2 + 1) * k2 / 2 <= e) k2++;
        K[e] = (e - k2 * (k2 - 1) / 2) | k2 << 16;
    }
    eigh_sync<WARP>();
    bool finite = eigh_sum<REG>(id, bad, scratch) == 0.f;
    bool converged = !finite;
    // a warp's matrices sweep until the last converges, those done before
    // it taking no rotations
    for (int sweep = 0; sweep < EIGH_MAX_SWEEPS && !(WARP ? mc_warp_sum(converged ? 0.f : 1.f) == 0.f : converged);
         sweep++) {
        float rotated = 0.f;
        for (int step = 0; step < players - 1; step++) {
            for (int k = t; k < pairs; k += nt) {  // each pair's rotation, and its own 2 x 2 block
                int p, q;
                mc_pair(k, step, players, p, q);
                float c = 1.f, s = 0.f;
                if (q < n && !converged) {
                    float apq = A[p * ld + q], app = A[p * ld + p], aqq = A[q * ld + q];
                    float g = 100.f * fabsf(apq);
                    if (apq != 0.f && !(fabsf(app) + g == fabsf(app) && fabsf(aqq) + g == fabsf(aqq))) {
                        float h = aqq - app, tn;
                        if (fabsf(h) + g == fabsf(h)) {
                            tn = apq / h;
                        } else {
                            float theta = 0.5f * h / apq;
                            tn = 1.f / (fabsf(theta) + sqrtf(fmaf(theta, theta, 1.f)));
                            if (theta < 0.f) tn = -tn;
                        }
                        c = 1.f / sqrtf(fmaf(tn, tn, 1.f));
                        s = tn * c;
                        A[p * ld + p] = app - tn * apq;
                        A[q * ld + q] = fmaf(tn, apq, aqq);
                        if (!(fabsf(tn) <= EIGH_STOP_TAN)) rotated += 1.f;  // NaN counts
                    }
                    A[p * ld + q] = 0.f;  // rotated away, or negligible
                }
                C[k] = c;
                S[k] = s;
                SO[k] = mc_player(k, step, players) == p ? s : -s;
                P[k] = p;
                Q[k] = q;
            }
            eigh_sync<WARP>();
            for (int e = t; e < blocks; e += nt) {  // the block of pairs (k, k2)
                int k = K[e] & 0xffff, k2 = K[e] >> 16;
                float c = C[k], s = S[k], c2 = C[k2], s2 = S[k2];
                if (s == 0.f && s2 == 0.f) continue;
                int p = P[k], q = Q[k], p2 = P[k2], q2 = Q[k2];
                // entry (x, y) of the block sits at (min, max): x and y are of different pairs
                int i00 = p < p2 ? p * ld + p2 : p2 * ld + p, i01 = p < q2 ? p * ld + q2 : q2 * ld + p;
                int i10 = q < p2 ? q * ld + p2 : p2 * ld + q, i11 = q < q2 ? q * ld + q2 : q2 * ld + q;
                bool h00 = p < n && p2 < n, h01 = p < n && q2 < n;  // byes have no entries
                bool h10 = q < n && p2 < n, h11 = q < n && q2 < n;
                float b00 = h00 ? A[i00] : 0.f, b01 = h01 ? A[i01] : 0.f, b10 = h10 ? A[i10] : 0.f;
                float b11 = h11 ? A[i11] : 0.f;
                float x0 = c2 * b00 - s2 * b01, x1 = fmaf(s2, b00, c2 * b01);  // B J_k2
                float y0 = c2 * b10 - s2 * b11, y1 = fmaf(s2, b10, c2 * b11);
                if (h00) A[i00] = c * x0 - s * y0;  // J_kᵀ (B J_k2)
                if (h01) A[i01] = c * x1 - s * y1;
                if (h10) A[i10] = fmaf(s, x0, c * y0);
                if (h11) A[i11] = fmaf(s, x1, c * y1);
            }
            if (WARP && vectors) {  // each lane's row of V: its pairs' slots, then the slots turn
#pragma unroll
                for (int k = 0; k < REG / 2; k++) {
                    float c = C[k], so = SO[k], x = vr[k], y = vr[REG - 1 - k];
                    vr[k] = c * x - so * y;
                    vr[REG - 1 - k] = fmaf(so, x, c * y);
                }
                float first = vr[1];
#pragma unroll
                for (int j = 1; j < REG - 1; j++) vr[j] = vr[j + 1];
                vr[REG - 1] = first;
            }
            // V J in shared memory: (row r, pair k) items, k = e / n by a
            // float reciprocal (exact here: e < 2^16, n < 2^8)
            for (int e = t; shared_v && e < n * pairs; e += nt) {
                int k = (int)(((float)e + 0.5f) * inv_n), r = e - k * n;
                float s = S[k];
                if (s == 0.f) continue;
                int p = P[k], q = Q[k];
                float c = C[k], x = V[r * ld + p], y = V[r * ld + q];
                V[r * ld + p] = c * x - s * y;
                V[r * ld + q] = fmaf(s, x, c * y);
            }
            eigh_sync<WARP>();
        }
        converged = eigh_sum<REG>(id, rotated, scratch) == 0.f;
    }
    for (int i = t; i < n; i += nt) {
        float x = A[i * ld + i];
        int r = 0;
        for (int j = 0; j < n; j++) {
            float y = A[j * ld + j];
            r += eigh_before(y, x) || (j < i && !eigh_before(x, y)) ? 1 : 0;
        }
        rank[i] = r;
    }
    eigh_sync<WARP>();
    if (!live) b = 0;  // its stores below are skipped; its barriers kept
    if (t == 0 && live) info[b] = finite && converged ? 0 : 1;
    float nan = mc_inf() - mc_inf();
    MC_GLOBAL T* w = (MC_GLOBAL T*)w_ + b * n;
    for (int i = t; live && i < n; i += nt) D::store(w + rank[i], finite ? A[i * ld + i] : nan);
    if (!vectors) return;
    MC_GLOBAL T* v = (MC_GLOBAL T*)v_ + b * nn;
    if (WARP) {
        // each lane's row of V staged in A (whose diagonal is out) in rank
        // order, then V's rows stored whole: the warp's stores coalesce,
        // where each lane storing its own row wrote 32 rows' entries at once
        eigh_sync<WARP>();
        if (t < n)
#pragma unroll
            for (int j = 0; j < (REG > 0 ? REG : 1); j++)
                if (j < n) A[t * ld + rank[j]] = finite ? vr[j] : nan;
        eigh_sync<WARP>();
        for (int r = 0; r < n; r++)
            if (live && t < n) D::store(v + r * n + t, A[r * ld + t]);
        return;
    }
    for (int e = t; e < nn; e += nt) {
        int r = e / n, i = e - r * n;
        D::store(v + r * n + rank[i], finite ? V[r * ld + i] : nan);
    }
}

// A block per matrix.
template <class D>
MC_DEVICE void eigh(MC_IDS, MC_GROUP float4* S4, MC_GLOBAL const void* a, MC_GLOBAL void* w, MC_GLOBAL void* v,
                    MC_GLOBAL int* info, int n, int upper, int vectors, int) {
    eigh_matrix<D, 0>(id, MC_TID, MC_NTHREADS, (MC_GROUP float*)S4, a, w, v, info, n, upper, vectors, MC_BLOCK, true);
}
#define EIGH_PARAMS                                                                                        \
    (MC_GLOBAL const void* a, MC_GLOBAL void* w, MC_GLOBAL void* v, MC_GLOBAL int* info, int n, int upper, \
     int vectors, int batch)
#define EIGH_ARGS (a, w, v, info, n, upper, vectors, batch)
MC_INSTANTIATE_DYNAMIC(eigh, float4, , EIGH_PARAMS, EIGH_ARGS)

// A warp per matrix up to order 32 (REG 24 or 32 players), two up to
// order 16 (REG 16, a half-warp each, where one left the other half idle):
// the block's warps each take theirs. A half past the batch's end keeps
// the barriers.
template <class D, int REG>
MC_DEVICE void eigh_warps(MC_IDS, MC_GROUP float4* S4, MC_GLOBAL const void* a, MC_GLOBAL void* w, MC_GLOBAL void* v,
                          MC_GLOBAL int* info, int n, int upper, int vectors, int batch) {
    const int LANES = eigh_lanes<REG>();
    int sub = (MC_TID & 31) / LANES, slot = (MC_TID >> 5) * (32 / LANES) + sub;  // the block's matrix
    mc_i64 b = (mc_i64)MC_BLOCK * (MC_NTHREADS / LANES) + slot;
    if (b - sub >= batch) return;  // the whole warp: nothing below waits for the others
    MC_GROUP float* M = (MC_GROUP float*)S4 + slot * eigh_floats(n, eigh_ld<REG>(n), false, REG / 2);
    eigh_matrix<D, REG>(id, MC_TID & (LANES - 1), LANES, M, a, w, v, info, n, upper, vectors, b, b < batch);
}
// The kernels eigh_warp16, eigh_warp24 and eigh_warp (32 players).
#define EIGH_WARP(NAME, REG)                                                                                        \
    template <class D>                                                                                              \
    MC_DEVICE void NAME(MC_IDS, MC_GROUP float4* S4, MC_GLOBAL const void* a, MC_GLOBAL void* w, MC_GLOBAL void* v, \
                        MC_GLOBAL int* info, int n, int upper, int vectors, int batch) {                            \
        eigh_warps<D, REG>(id, S4, a, w, v, info, n, upper, vectors, batch);                                        \
    }
EIGH_WARP(eigh_warp16, 16)
EIGH_WARP(eigh_warp24, 24)
EIGH_WARP(eigh_warp, 32)
MC_INSTANTIATE_DYNAMIC(eigh_warp16, float4, , EIGH_PARAMS, EIGH_ARGS)
MC_INSTANTIATE_DYNAMIC(eigh_warp24, float4, , EIGH_PARAMS, EIGH_ARGS)
MC_INSTANTIATE_DYNAMIC(eigh_warp, float4, , EIGH_PARAMS, EIGH_ARGS)
