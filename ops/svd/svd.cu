// Batched thin SVD by parallel one-sided Jacobi on B, the matrix or its
// transpose for a wide one (rows x cols), divided by its largest magnitude,
// and V (cols x cols). A sweep is the players - 1 steps of the round-robin
// tournament over B's columns (rounded up to even, or to the warp kernel's
// 16 or 32 players: the extra ones byes); each step's pairs are disjoint:
// the columns' norms and product, then the rotation that makes them
// orthogonal (none where they are, to ops/svd's tolerance), on both
// columns of B and of V. Up to 32 rows and columns a warp per matrix
// (svd_warp16, svd_warp: several a block), lane j holding column j of B
// and of V in registers, a pair's lanes trading theirs by shuffles; above,
// a block per matrix (svd), B and V in shared memory by columns (column j
// at B[j * rows]), a warp per pair. The sweeps end after one whose
// rotations all had sines at most SVD_STOP_SIN (simd.SVDStopSin, 2^-12:
// convergence is quadratic) and the tolerance. The singular values are B's column norms, ranked descending
// (ties by index); B's normalized columns (a zero or residue one replaced
// by a unit vector orthogonal to the rest) and V's are the singular
// vectors, U's and Vh's as the matrix is tall or wide.
#define SVD_MAX_SWEEPS 40

// The floats of shared memory one matrix takes: B, V where the vectors are
// wanted, each column's norm and rank, a completed column and
// mc_block_sum's scratch (ops/svd/gpu.go's matrixBytes).
MC_DEVICE int svd_floats(int rows, int cols, bool vectors) {
    return rows * cols + (vectors ? cols * cols : 0) + 2 * cols + rows + MC_BLOCK_SUM_SCRATCH;
}

#define SVD_TOLERANCE 5.9604645e-8f  // times √rows: ops/svd's tolerance
#define SVD_STOP_SIN 0.000244140625f

// svd_angle is the rotation that makes columns x and y orthogonal, from
// ‖x‖² = ax, ‖y‖² = ay and x·y = g, as its sine s and tau = s / (1 + c),
// and whether there is one: none where they are orthogonal to tol, or
// either column's squared norm is at most residue (ops/svd's tolerance and
// frozen), or the angle is too small to move them. The rotation is applied
// as x' = x - s (y + tau x), y' = y + s (x - tau y): c x - s y with the
// cosine's distance from 1 kept exactly (a small angle's c rounds to 1,
// which would grow every norm by s² a rotation).
MC_DEVICE bool svd_angle(float ax, float ay, float g, float tol, float residue, MC_THREAD float& s,
                         MC_THREAD float& tau) {
    s = 0.f, tau = 0.f;
    if (!(fabsf(g) > tol * sqrtf(ax) * sqrtf(ay)) || !(fminf(ax, ay) > residue)) return false;
    float zeta = 0.5f * (ay - ax) / g;
    float tn = 1.f / (fabsf(zeta) + sqrtf(fmaf(zeta, zeta, 1.f)));
    if (zeta < 0.f) tn = -tn;
    if (tn == 0.f) return false;
    float c = 1.f / sqrtf(fmaf(tn, tn, 1.f));
    s = tn * c;
    tau = s / (1.f + c);
    return true;
}

template <bool WARP> MC_DEVICE void svd_sync() {
    if (WARP) MC_WARP_BARRIER();
    else MC_BARRIER();
}

template <bool WARP> MC_DEVICE float svd_sum(MC_IDS, float v, MC_GROUP float* scratch) {
    return WARP ? mc_warp_sum(v) : mc_block_sum(id, v, scratch);
}

// svd_rotate rotates columns X and Y of length len (svd_angle's form), a
// lane of the warp at a time.
MC_DEVICE void svd_rotate(MC_GROUP float* X, MC_GROUP float* Y, int len, int lane, float s, float tau) {
    for (int i = lane; i < len; i += 32) {
        float x = X[i], y = Y[i];
        X[i] = fmaf(-s, fmaf(tau, x, y), x);
        Y[i] = fmaf(s, fmaf(-tau, y, x), y);
    }
}

// Whether column i of B stays as it is while column j (of norm at most
// cut) is completed: every longer column, and the others completed before
// j.
MC_DEVICE bool svd_kept(MC_GROUP const float* sigma, float cut, int i, int j) {
    return i != j && (sigma[i] > cut || i < j);
}

// svd_complete replaces each column of B whose norm is at most cut (the
// others unit) by a unit vector orthogonal to the kept ones: Gram-Schmidt,
// twice, from the unit vector of the row those fill least (ops/svd's
// complete); by threads t of nt, the block's or (WARP) a warp's.
template <bool WARP>
MC_DEVICE void svd_complete(MC_IDS, int t, int nt, MC_GROUP float* B, int rows, int cols, MC_GROUP const float* sigma,
                            float cut, MC_GROUP float* x, MC_GROUP float* scratch) {
    for (int j = 0; j < cols; j++) {
        if (sigma[j] > cut) continue;
        for (int e = t; e < rows; e += nt) {
            float fill = 0.f;
            for (int i = 0; i < cols; i++)
                if (svd_kept(sigma, cut, i, j)) fill = fmaf(B[i * rows + e], B[i * rows + e], fill);
            x[e] = fill;
        }
        svd_sync<WARP>();
        int best = 0;
        for (int e = 1; e < rows; e++)
            if (x[e] < x[best]) best = e;
        svd_sync<WARP>();
        for (int e = t; e < rows; e += nt) x[e] = e == best ? 1.f : 0.f;
        for (int pass = 0; pass < 2; pass++)
            for (int i = 0; i < cols; i++) {
                if (!svd_kept(sigma, cut, i, j)) continue;
                float d = 0.f;
                for (int e = t; e < rows; e += nt) d = fmaf(B[i * rows + e], x[e], d);
                d = svd_sum<WARP>(id, d, scratch);
                for (int e = t; e < rows; e += nt) x[e] -= d * B[i * rows + e];
            }
        float sq = 0.f;
        for (int e = t; e < rows; e += nt) sq = fmaf(x[e], x[e], sq);
        float norm = sqrtf(svd_sum<WARP>(id, sq, scratch));
        for (int e = t; e < rows; e += nt) B[j * rows + e] = x[e] / norm;
        svd_sync<WARP>();
    }
}

template <class D>
MC_DEVICE void svd(MC_IDS, MC_GROUP float4* S4, MC_GLOBAL const void* a_, MC_GLOBAL void* u_, MC_GLOBAL void* s_,
                   MC_GLOBAL void* vh_, MC_GLOBAL int* info, int m, int n, int vectors, int) {
    typedef typename D::T T;
    int t = MC_TID, nt = MC_NTHREADS, lane = t & 31, warp = t >> 5, warps = nt >> 5;
    mc_i64 b = MC_BLOCK;
    bool wide = m < n;
    int rows = wide ? n : m, cols = wide ? m : n, mn = m * n;
    MC_GROUP float* B = (MC_GROUP float*)S4;
    MC_GROUP float* V = B + rows * cols;
    MC_GROUP float* sigma = V + (vectors ? cols * cols : 0);
    MC_GROUP int* rank = (MC_GROUP int*)(sigma + cols);
    MC_GROUP float* x = (MC_GROUP float*)(rank + cols);
    MC_GROUP float* scratch = x + rows;
    MC_GLOBAL const T* a = (MC_GLOBAL const T*)a_ + b * mn;
    float amax = 0.f, bad = 0.f;
    for (int e = t; e < mn; e += nt) {  // A[i][j]: column j of a tall B, column i of a wide one
        int i = e / n, j = e - i * n;
        float v = D::load(a + e);
        if (!(v * 0.f == 0.f)) bad = 1.f;  // NaN or infinite
        amax = fmaxf(amax, fabsf(v));
        B[wide ? i * rows + j : j * rows + i] = v;
    }
    amax = mc_block_max(id, amax, scratch);
    bool finite = mc_block_sum(id, bad, scratch) == 0.f;
    float div = amax > 0.f ? amax : 1.f;
    float sq = 0.f;
    for (int e = t; e < mn; e += nt) {  // each thread scales the entries it stored
        int i = e / n, j = e - i * n, at = wide ? i * rows + j : j * rows + i;
        float x = finite ? B[at] / div : 0.f;
        B[at] = x;
        sq = fmaf(x, x, sq);
    }
    for (int e = t; vectors && e < cols * cols; e += nt) V[e] = e % (cols + 1) == 0 ? 1.f : 0.f;
    float tol = sqrtf((float)rows) * SVD_TOLERANCE, residue = 4.f * tol * tol * mc_block_sum(id, sq, scratch);
    float stop = fmaxf(tol, SVD_STOP_SIN);
    MC_BARRIER();  // B and V stored (mc_block_sum has no barrier in a one-warp block)
    int players = 2 * ((cols + 1) / 2), pairs = players / 2;
    bool converged = !finite || cols < 2;
    for (int sweep = 0; sweep < SVD_MAX_SWEEPS && !converged; sweep++) {
        float rotated = 0.f;
        for (int step = 0; step < players - 1; step++) {
            for (int k = warp; k < pairs; k += warps) {  // uniform in the warp: each sum reaches every lane
                int p, q;
                mc_pair(k, step, players, p, q);
                if (q >= cols) continue;
                MC_GROUP float* X = B + p * rows;
                MC_GROUP float* Y = B + q * rows;
                float alpha = 0.f, beta = 0.f, gamma = 0.f;
                for (int i = lane; i < rows; i += 32) {
                    float xi = X[i], yi = Y[i];
                    alpha = fmaf(xi, xi, alpha);
                    beta = fmaf(yi, yi, beta);
                    gamma = fmaf(xi, yi, gamma);
                }
                alpha = mc_warp_sum(alpha);
                beta = mc_warp_sum(beta);
                gamma = mc_warp_sum(gamma);
                float s, tau;
                if (!svd_angle(alpha, beta, gamma, tol, residue, s, tau)) continue;
                if (fabsf(s) > stop) rotated = 1.f;  // smaller ones still rotate, and end the sweeps
                svd_rotate(X, Y, rows, lane, s, tau);
                if (vectors) svd_rotate(V + p * cols, V + q * cols, cols, lane, s, tau);
            }
            MC_BARRIER();
        }
        converged = mc_block_sum(id, rotated, scratch) == 0.f;
    }
    for (int j = t; j < cols; j += nt) {
        float norm2 = 0.f;
        for (int i = 0; i < rows; i++) norm2 = fmaf(B[j * rows + i], B[j * rows + i], norm2);
        sigma[j] = sqrtf(norm2);
    }
    MC_BARRIER();
    for (int j = t; j < cols; j += nt) {
        int r = 0;
        for (int i = 0; i < cols; i++) r += sigma[i] > sigma[j] || (sigma[i] == sigma[j] && i < j) ? 1 : 0;
        rank[j] = r;
    }
    MC_BARRIER();
    if (t == 0) info[b] = finite && converged ? 0 : 1;
    float nan = mc_inf() - mc_inf();
    MC_GLOBAL T* s = (MC_GLOBAL T*)s_ + b * cols;
    for (int j = t; j < cols; j += nt) D::store(s + rank[j], finite ? sigma[j] * amax : nan);
    if (!vectors) return;
    float cut = sqrtf(1.25f * residue);  // at or below it, residue (a margin for ‖B‖²'s rounding: ops/svd's store)
    for (int e = t; e < rows * cols; e += nt) {
        float norm = sigma[e / rows];
        if (norm > cut) B[e] /= norm;
    }
    MC_BARRIER();
    svd_complete<false>(id, t, nt, B, rows, cols, sigma, cut, x, scratch);
    // B's columns are U's (tall) or Vh's rows (wide); V's the other side's
    MC_GLOBAL T* u = (MC_GLOBAL T*)u_ + b * m * cols;
    MC_GLOBAL T* vh = (MC_GLOBAL T*)vh_ + b * cols * n;
    for (int e = t; e < rows * cols; e += nt) {
        int j = e / rows, i = e - j * rows, r = rank[j];
        D::store(wide ? vh + r * n + i : u + i * cols + r, finite ? B[e] : nan);
    }
    for (int e = t; e < cols * cols; e += nt) {
        int j = e / cols, l = e - j * cols, r = rank[j];
        D::store(wide ? u + l * cols + r : vh + r * n + l, finite ? V[e] : nan);
    }
}
MC_INSTANTIATE_DYNAMIC(svd, float4, ,
                       (MC_GLOBAL const void* a, MC_GLOBAL void* u, MC_GLOBAL void* s, MC_GLOBAL void* vh,
                        MC_GLOBAL int* info, int m, int n, int vectors, int batch),
                       (a, u, s, vh, info, m, n, vectors, batch))

// A warp per matrix of up to ROWS (16 or 32) rows and columns of B, its
// shared memory M (svd_floats without V: a zero column's completion):
// lane j holds column j of B in col and of V in v, columns past cols zero
// and never rotated; each step, lane j and its partner trade their columns
// by shuffles and both take the pair's rotation, the lower lane's column
// as x.
template <class D, int ROWS>
MC_DEVICE void svd_warp_matrix(MC_IDS, MC_GROUP float* M, MC_GLOBAL const void* a_, MC_GLOBAL void* u_,
                               MC_GLOBAL void* s_, MC_GLOBAL void* vh_, MC_GLOBAL int* info, int m, int n, int vectors,
                               mc_i64 b) {
    typedef typename D::T T;
    int lane = MC_TID & 31;
    bool wide = m < n;
    int rows = wide ? n : m, cols = wide ? m : n;
    MC_GLOBAL const T* a = (MC_GLOBAL const T*)a_ + b * m * n;
    float col[ROWS], v[ROWS], amax = 0.f, bad = 0.f;
#pragma unroll
    for (int i = 0; i < ROWS; i++) {
        float x = lane < cols && i < rows ? D::load(a + (wide ? lane * n + i : i * n + lane)) : 0.f;
        if (!(x * 0.f == 0.f)) bad = 1.f;  // NaN or infinite
        amax = fmaxf(amax, fabsf(x));
        col[i] = x;
        v[i] = i == lane ? 1.f : 0.f;
    }
    amax = mc_warp_max(amax);
    bool finite = mc_warp_sum(bad) == 0.f;
    float div = amax > 0.f ? amax : 1.f;
    float sq = 0.f;
#pragma unroll
    for (int i = 0; i < ROWS; i++) {
        col[i] = finite ? col[i] / div : 0.f;
        sq = fmaf(col[i], col[i], sq);
    }
    float tol = sqrtf((float)rows) * SVD_TOLERANCE, residue = 4.f * tol * tol * mc_warp_sum(sq);
    float stop = fmaxf(tol, SVD_STOP_SIN);
    int players = cols <= 16 ? 16 : 32;
    bool converged = !finite || cols < 2;
    for (int sweep = 0; sweep < SVD_MAX_SWEEPS && !converged; sweep++) {
        float rotated = 0.f;
        for (int step = 0; step < players - 1; step++) {
            // this lane's tournament position (mc_player's inverse), its partner's index
            int x = lane - 1 - step;
            int pos = lane == 0 ? 0 : (x < 0 ? x + players - 1 : x) + 1;
            int partner = lane < players ? mc_player(players - 1 - pos, step, players) : lane;
            float y[ROWS], alpha = 0.f, gamma0 = 0.f, gamma1 = 0.f;
#pragma unroll
            for (int i = 0; i < ROWS; i++) {
                y[i] = mc_shfl(col[i], partner);
                alpha = fmaf(col[i], col[i], alpha);
                if (i % 2) gamma1 = fmaf(col[i], y[i], gamma1);
                else gamma0 = fmaf(col[i], y[i], gamma0);
            }
            float beta = mc_shfl(alpha, partner);
            bool low = lane < partner;
            float s = 0.f, tau = 0.f;
            if (lane < cols && partner < cols)
                svd_angle(low ? alpha : beta, low ? beta : alpha, gamma0 + gamma1, tol, residue, s, tau);
            if (fabsf(s) > stop) rotated = 1.f;  // smaller ones still rotate, and end the sweeps
            // svd_angle's form, the lower lane's column as x: own + so (other + to own)
            float so = low ? -s : s, to = low ? tau : -tau;
#pragma unroll
            for (int i = 0; i < ROWS; i++) col[i] = fmaf(so, fmaf(to, col[i], y[i]), col[i]);
            if (vectors)
#pragma unroll
                for (int i = 0; i < ROWS; i++) v[i] = fmaf(so, fmaf(to, v[i], mc_shfl(v[i], partner)), v[i]);
        }
        converged = mc_warp_sum(rotated) == 0.f;
    }
    float norm2 = 0.f;
#pragma unroll
    for (int i = 0; i < ROWS; i++) norm2 = fmaf(col[i], col[i], norm2);
    float sigma = sqrtf(norm2);
    int rank = 0;
    for (int i = 0; i < 32; i++) {
        float other = mc_shfl(sigma, i);
        rank += i < cols && (other > sigma || (other == sigma && i < lane)) ? 1 : 0;
    }
    if (lane == 0) info[b] = finite && converged ? 0 : 1;
    float nan = mc_inf() - mc_inf();
    if (lane < cols) D::store((MC_GLOBAL T*)s_ + b * cols + rank, finite ? sigma * amax : nan);
    if (!vectors) return;
    float cut = sqrtf(1.25f * residue);  // at or below it, residue (ops/svd's store)
#pragma unroll
    for (int i = 0; i < ROWS; i++)
        if (sigma > cut) col[i] /= sigma;
    if (mc_warp_sum(lane < cols && sigma <= cut ? 1.f : 0.f) > 0.f) {  // complete those columns in shared memory
        MC_GROUP float* B = M;
        MC_GROUP float* sig = B + rows * cols;
        MC_GROUP float* x = sig + 2 * cols;
        if (lane < cols) {
            sig[lane] = sigma;
#pragma unroll
            for (int i = 0; i < ROWS; i++)
                if (i < rows) B[lane * rows + i] = col[i];
        }
        MC_WARP_BARRIER();
        svd_complete<true>(id, lane, 32, B, rows, cols, sig, cut, x, x + rows);
        if (lane < cols)
#pragma unroll
            for (int i = 0; i < ROWS; i++)
                if (i < rows) col[i] = B[lane * rows + i];
    }
    if (lane >= cols) return;
    MC_GLOBAL T* u = (MC_GLOBAL T*)u_ + b * m * cols;
    MC_GLOBAL T* vh = (MC_GLOBAL T*)vh_ + b * cols * n;
#pragma unroll
    for (int i = 0; i < ROWS; i++) {
        if (i < rows) D::store(wide ? vh + rank * n + i : u + i * cols + rank, finite ? col[i] : nan);
        if (i < cols) D::store(wide ? u + i * cols + rank : vh + rank * n + i, finite ? v[i] : nan);
    }
}

// A warp per matrix, up to ROWS (16 or 32) rows and columns of B: the
// block's warps each take one.
template <class D, int ROWS>
MC_DEVICE void svd_warps(MC_IDS, MC_GROUP float4* S4, MC_GLOBAL const void* a, MC_GLOBAL void* u, MC_GLOBAL void* s,
                         MC_GLOBAL void* vh, MC_GLOBAL int* info, int m, int n, int vectors, int batch) {
    int warp = MC_TID >> 5;
    mc_i64 b = (mc_i64)MC_BLOCK * (MC_NTHREADS >> 5) + warp;
    if (b >= batch) return;  // the whole warp: nothing below waits for the others
    int rows = m > n ? m : n, cols = m < n ? m : n;
    MC_GROUP float* M = (MC_GROUP float*)S4 + warp * svd_floats(rows, cols, false);
    svd_warp_matrix<D, ROWS>(id, M, a, u, s, vh, info, m, n, vectors, b);
}
template <class D>
MC_DEVICE void svd_warp16(MC_IDS, MC_GROUP float4* S4, MC_GLOBAL const void* a, MC_GLOBAL void* u, MC_GLOBAL void* s,
                          MC_GLOBAL void* vh, MC_GLOBAL int* info, int m, int n, int vectors, int batch) {
    svd_warps<D, 16>(id, S4, a, u, s, vh, info, m, n, vectors, batch);
}
MC_INSTANTIATE_DYNAMIC(svd_warp16, float4, ,
                       (MC_GLOBAL const void* a, MC_GLOBAL void* u, MC_GLOBAL void* s, MC_GLOBAL void* vh,
                        MC_GLOBAL int* info, int m, int n, int vectors, int batch),
                       (a, u, s, vh, info, m, n, vectors, batch))
template <class D>
MC_DEVICE void svd_warp(MC_IDS, MC_GROUP float4* S4, MC_GLOBAL const void* a, MC_GLOBAL void* u, MC_GLOBAL void* s,
                        MC_GLOBAL void* vh, MC_GLOBAL int* info, int m, int n, int vectors, int batch) {
    svd_warps<D, 32>(id, S4, a, u, s, vh, info, m, n, vectors, batch);
}
MC_INSTANTIATE_DYNAMIC(svd_warp, float4, ,
                       (MC_GLOBAL const void* a, MC_GLOBAL void* u, MC_GLOBAL void* s, MC_GLOBAL void* vh,
                        MC_GLOBAL int* info, int m, int n, int vectors, int batch),
                       (a, u, s, vh, info, m, n, vectors, batch))
