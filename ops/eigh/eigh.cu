// Batched symmetric eigendecomposition: a block per matrix, A (both
// triangles) and V in shared memory (row stride n + 1). Parallel cyclic
// Jacobi: a sweep is N - 1 steps of the round-robin tournament over the
// n rounded up to even indices (the extra one a bye), each step
// rotating its N / 2 disjoint pairs at once, columns (A J, V J) then rows
// (Jᵀ A), a barrier each. A pair is not rotated where its a_pq is zero or
// negligible beside both diagonal entries; the sweeps end once one rotates
// nothing. The eigenvalues leave ranked (ascending, NaN last, ties by
// index) with their columns of V.
#define EIGH_MAX_SWEEPS 40

// The index at position pos of step step of the tournament: position 0
// stays, the others turn.
MC_DEVICE int eigh_player(int pos, int step, int players) {
    return pos == 0 ? 0 : (pos - 1 + step) % (players - 1) + 1;
}

MC_DEVICE bool eigh_before(float x, float y) { return x < y || (y != y && x == x); }

MC_DEVICE void eigh_rotate(MC_GROUP float* x, MC_GROUP float* y, float c, float s) {
    float u = *x, v = *y;
    *x = c * u - s * v;
    *y = fmaf(s, u, c * v);
}

template <class D>
MC_DEVICE void eigh(MC_IDS, MC_GROUP float4* S4, MC_GLOBAL const void* a_, MC_GLOBAL void* w_, MC_GLOBAL void* v_,
                    MC_GLOBAL int* info, int n, int upper, int vectors, int) {
    typedef typename D::T T;
    int ld = n + 1, nn = n * n, pairs = (n + 1) / 2, players = 2 * pairs;
    MC_GROUP float* A = (MC_GROUP float*)S4;
    MC_GROUP float* V = A + n * ld;
    MC_GROUP float* C = V + (vectors ? n * ld : 0);  // each pair's cosine and sine
    MC_GROUP float* S = C + pairs;
    MC_GROUP float* scratch = S + pairs;  // mc_block_sum's
    MC_GROUP int* rank = (MC_GROUP int*)(scratch + MC_BLOCK_SUM_SCRATCH);
    mc_i64 b = MC_BLOCK;
    MC_GLOBAL const T* a = (MC_GLOBAL const T*)a_ + b * nn;
    float bad = 0.f;
    for (int e = MC_TID; e < nn; e += MC_NTHREADS) {
        int r = e / n, c = e - r * n;
        if (upper ? c >= r : c <= r) {
            float x = D::load(a + e);
            A[r * ld + c] = x;
            A[c * ld + r] = x;
            if (!(x * 0.f == 0.f)) bad = 1.f;  // NaN or infinite
        }
        if (vectors) V[r * ld + c] = r == c ? 1.f : 0.f;
    }
    MC_BARRIER();
    bool finite = mc_block_sum(id, bad, scratch) == 0.f;
    bool converged = !finite;
    for (int sweep = 0; sweep < EIGH_MAX_SWEEPS && !converged; sweep++) {
        float rotated = 0.f;
        for (int step = 0; step < players - 1; step++) {
            for (int k = MC_TID; k < pairs; k += MC_NTHREADS) {
                int p = eigh_player(k, step, players), q = eigh_player(players - 1 - k, step, players);
                if (p > q) {
                    int t = p;
                    p = q;
                    q = t;
                }
                float c = 1.f, s = 0.f;
                if (q < n) {
                    float apq = A[p * ld + q], app = A[p * ld + p], aqq = A[q * ld + q];
                    float g = 100.f * fabsf(apq);
                    if (apq != 0.f && !(fabsf(app) + g == fabsf(app) && fabsf(aqq) + g == fabsf(aqq))) {
                        float h = aqq - app, t;
                        if (fabsf(h) + g == fabsf(h)) {
                            t = apq / h;
                        } else {
                            float theta = 0.5f * h / apq;
                            t = 1.f / (fabsf(theta) + sqrtf(fmaf(theta, theta, 1.f)));
                            if (theta < 0.f) t = -t;
                        }
                        c = 1.f / sqrtf(fmaf(t, t, 1.f));
                        s = t * c;
                        rotated += 1.f;
                    }
                }
                C[k] = c;
                S[k] = s;
            }
            MC_BARRIER();
            for (int e = MC_TID; e < n * pairs; e += MC_NTHREADS) {  // columns: (row r, pair k)
                int k = e / n, r = e - k * n;
                float s = S[k];
                if (s == 0.f) continue;
                int p = eigh_player(k, step, players), q = eigh_player(players - 1 - k, step, players);
                if (p > q) {
                    int t = p;
                    p = q;
                    q = t;
                }
                eigh_rotate(A + r * ld + p, A + r * ld + q, C[k], s);
                if (vectors) eigh_rotate(V + r * ld + p, V + r * ld + q, C[k], s);
            }
            MC_BARRIER();
            for (int e = MC_TID; e < n * pairs; e += MC_NTHREADS) {  // rows: (pair k, column r)
                int k = e / n, r = e - k * n;
                float s = S[k];
                if (s == 0.f) continue;
                int p = eigh_player(k, step, players), q = eigh_player(players - 1 - k, step, players);
                if (p > q) {
                    int t = p;
                    p = q;
                    q = t;
                }
                eigh_rotate(A + p * ld + r, A + q * ld + r, C[k], s);
                if (r == p) A[q * ld + p] = 0.f;  // the pair's own entries, zero up to rounding
                if (r == q) A[p * ld + q] = 0.f;
            }
            MC_BARRIER();
        }
        converged = mc_block_sum(id, rotated, scratch) == 0.f;
    }
    for (int i = MC_TID; i < n; i += MC_NTHREADS) {
        float x = A[i * ld + i];
        int r = 0;
        for (int j = 0; j < n; j++) {
            float y = A[j * ld + j];
            r += eigh_before(y, x) || (j < i && !eigh_before(x, y)) ? 1 : 0;
        }
        rank[i] = r;
    }
    MC_BARRIER();
    if (MC_TID == 0) info[b] = finite && converged ? 0 : 1;
    float nan = mc_inf() - mc_inf();
    MC_GLOBAL T* w = (MC_GLOBAL T*)w_ + b * n;
    for (int i = MC_TID; i < n; i += MC_NTHREADS) D::store(w + rank[i], finite ? A[i * ld + i] : nan);
    if (!vectors) return;
    MC_GLOBAL T* v = (MC_GLOBAL T*)v_ + b * nn;
    for (int e = MC_TID; e < nn; e += MC_NTHREADS) {
        int r = e / n, i = e - r * n;
        D::store(v + r * n + rank[i], finite ? V[r * ld + i] : nan);
    }
}
MC_INSTANTIATE_DYNAMIC(eigh, float4, ,
                       (MC_GLOBAL const void* a, MC_GLOBAL void* w, MC_GLOBAL void* v, MC_GLOBAL int* info, int n,
                        int upper, int vectors, int batch),
                       (a, w, v, info, n, upper, vectors, batch))
