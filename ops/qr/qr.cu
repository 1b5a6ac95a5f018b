// Householder QR on the GPU. Working matrices are float32, column-major.
//
// Small matrices (max(m, n, q's columns) <= 128): qr_cols, one block per
// matrix, a thread per column holding it in registers, LAPACK's geqr2 then
// org2r.
//
// Larger ones: blocked Householder (compact WY) in the caller's workspace:
// qr_load copies a in; per panel of QR_NB columns, qr_panel factors the
// panel (a group of blocks per matrix, each owning a slice of rows) and
// builds its T; qr_vtw, qr_wsum and qr_update apply I - V T^T V^T to the
// trailing columns; q is formed by applying the panels backwards to the
// identity with the same three kernels; qr_store writes q and r in the
// dtype.

#define QR_NB 32

// A column's Householder reflector (LAPACK's slarfg) in float32, neither
// overflowing nor underflowing for columns of 1e-30 or 1e30 or left with
// denormal rounding residue: the caller gives the column as multiples of a
// power of two, 2^e (|x| / 2^e <= 1 where the column is not of moderate
// size; e in [-126, 127]): alpha the diagonal entry and ss the sum of
// (x / 2^e)^2 below it. beta replaces the diagonal, an entry x below
// becomes scaled(x), and tau is returned (0: nothing to reflect).
struct Reflector {
    float beta, tau, scale, unit_inv;
    MC_METHOD Reflector(float alpha, float ss, int e) {
        beta = alpha, tau = 0.f, scale = 1.f, unit_inv = 1.f;
        if (ss > 0.f) {
            unit_inv = mc_pow2(-e);
            float a = alpha * unit_inv, b = -copysignf(sqrtf(a * a + ss), a);
            beta = b * mc_pow2(e);
            scale = 1.f / (a - b);  // |a - b| >= |b| >= |a|: no overflow
            tau = (b - a) / b;
        }
    }
    MC_METHOD float scaled(float x) const { return x * unit_inv * scale; }
};

// Sums p[0..2S) over the warp (S = 16, 8, ...): lane l ends with the sum
// of every lane's p[l mod 2S] in p[0] (2S-1 shuffles for 2S sums, then one
// per remaining lane bit). Recursion by template keeps every index constant,
// so p stays in registers.
template <int S> struct QrWarpHalves {
    template <class V> MC_METHOD static void run(MC_THREAD V* p, int lane) {
        bool upper = lane & S;
#pragma unroll
        for (int t = 0; t < S; t++) {
            V send = upper ? p[t] : p[t + S], keep = upper ? p[t + S] : p[t];
            p[t] = keep + mc_shfl_xor(send, S);
        }
        QrWarpHalves<S / 2>::run(p, lane);
    }
};
template <> struct QrWarpHalves<0> {
    template <class V> MC_METHOD static void run(MC_THREAD V*, int) {}
};
template <int S, class V> MC_DEVICE void qr_warp_sums(MC_THREAD V* p, int lane) {
    QrWarpHalves<S>::run(p, lane);
#pragma unroll
    for (int s = 2 * S; s < 32; s <<= 1) p[0] += mc_shfl_xor(p[0], s);
}

// ---- small matrices --------------------------------------------------------

// qr_cols: thread c holds column c of the matrix (R rows, R = 32, 64 or
// 128 >= m) in registers, so a reflector's dot product with a column and
// the column's update need no communication: the only shared state is the
// reflectors, each built in shared memory by its column's warp (zero above
// the diagonal, 1 on it) and read by every thread as broadcasts. Rows above
// the reflector are skipped four at a time (the test is the same in every
// thread). Global reads and writes go a row at a time: consecutive threads,
// consecutive columns.
template <int R>
MC_DEVICE void qr_col_reflect(MC_THREAD float (&x)[R], MC_GROUP const float4* v, int j, int m, float t) {
    float d[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int p = 0; p < R / 4; p++)
        if (4 * p + 3 >= j && 4 * p < m) {
            float4 w = v[p];
            d[0] += w.x * x[4 * p], d[1] += w.y * x[4 * p + 1], d[2] += w.z * x[4 * p + 2], d[3] += w.w * x[4 * p + 3];
        }
    float s = t * ((d[0] + d[1]) + (d[2] + d[3]));
#pragma unroll
    for (int p = 0; p < R / 4; p++)
        if (4 * p + 3 >= j && 4 * p < m) {
            float4 w = v[p];
            x[4 * p] -= s * w.x, x[4 * p + 1] -= s * w.y, x[4 * p + 2] -= s * w.z, x[4 * p + 3] -= s * w.w;
        }
}

// x = H_j H_j+1 x in one pass over x (reflectors j and j+1 from v): with
// d0, d1 the reflectors' dot products with x and g = v_j . v_j+1,
// x -= a1 v_j+1 + a0 v_j, a1 = t1 d1, a0 = t0 (d0 - g a1).
template <int R>
MC_DEVICE void qr_col_reflect2(MC_THREAD float (&x)[R], MC_GROUP const float4* v, int j, int m, float t0, float t1) {
    float d0 = 0.f, d1 = 0.f, g = 0.f;
#pragma unroll
    for (int p = 0; p < R / 4; p++)
        if (4 * p + 3 >= j && 4 * p < m) {
            float4 u = v[p], w = v[p + R / 4];
            d0 += (u.x * x[4 * p] + u.y * x[4 * p + 1]) + (u.z * x[4 * p + 2] + u.w * x[4 * p + 3]);
            d1 += (w.x * x[4 * p] + w.y * x[4 * p + 1]) + (w.z * x[4 * p + 2] + w.w * x[4 * p + 3]);
            g += (u.x * w.x + u.y * w.y) + (u.z * w.z + u.w * w.w);
        }
    float a1 = t1 * d1, a0 = t0 * (d0 - g * a1);
#pragma unroll
    for (int p = 0; p < R / 4; p++)
        if (4 * p + 3 >= j && 4 * p < m) {
            float4 u = v[p], w = v[p + R / 4];
            x[4 * p] -= a0 * u.x + a1 * w.x, x[4 * p + 1] -= a0 * u.y + a1 * w.y;
            x[4 * p + 2] -= a0 * u.z + a1 * w.z, x[4 * p + 3] -= a0 * u.w + a1 * w.w;
        }
}

// V, the block's dynamic shared memory: reflector j is R floats from
// V + j * R / 4, then the taus and r's diagonal.
template <class D, int R>
MC_DEVICE void qr_cols(MC_IDS, MC_GROUP float4* V, MC_GLOBAL const void* a_, MC_GLOBAL void* q_, MC_GLOBAL void* r_,
                       int m, int n, int qc, int rr) {
    typedef typename D::T T;
    int k = min(m, n), c = MC_TID, warp = c >> 5, lane = c & 31;
    MC_GROUP float *tau = (MC_GROUP float*)(V + k * (R / 4)), *diag = tau + k;  // diag: r's diagonal
    mc_i64 b = MC_BLOCK;
    MC_GLOBAL const T* a = (MC_GLOBAL const T*)a_ + b * m * n;
    float x[R];
#pragma unroll
    for (int i = 0; i < R; i++) x[i] = c < n && i < m ? D::load(a + i * n + c) : 0.f;
    for (int j = 0; j < k; j++) {
        MC_GROUP float4* vj = V + j * (R / 4);
        if (warp == j >> 5) {
            // The owner leaves its column in reflector j's place; its warp
            // builds the reflector there, a lane taking rows lane + 32 e.
            if (c == j)
#pragma unroll
                for (int p = 0; p < R / 4; p++)
                    if (4 * p + 3 >= j) vj[p] = make_float4(x[4 * p], x[4 * p + 1], x[4 * p + 2], x[4 * p + 3]);
            MC_WARP_BARRIER();
            MC_GROUP float* col = (MC_GROUP float*)vj;
            float e[R / 32], alpha = 0.f, ss = 0.f;
#pragma unroll
            for (int r = 0; r < R / 32; r++) {
                int i = lane + 32 * r;
                e[r] = col[i];
                if (i == j) alpha = e[r];
                if (i > j) ss += e[r] * e[r];
            }
            alpha = mc_warp_sum(alpha), ss = mc_warp_sum(ss);
            // a column far from 1 in size (rare: the test is the warp's)
            // is summed again as multiples of its largest entry's power of two
            int unit = 0;
            float norm2 = alpha * alpha + ss;
            if (!(norm2 >= 1e-30f && norm2 <= 1e30f)) {
                float amax = 0.f;
#pragma unroll
                for (int r = 0; r < R / 32; r++)
                    if (lane + 32 * r >= j) amax = fmaxf(amax, fabsf(e[r]));
                unit = min(mc_exponent(mc_warp_max(amax)), 127);
                float inv = mc_pow2(-unit);
                ss = 0.f;
#pragma unroll
                for (int r = 0; r < R / 32; r++)
                    if (lane + 32 * r > j) ss += (e[r] * inv) * (e[r] * inv);
                ss = mc_warp_sum(ss);
            }
            Reflector h(alpha, ss, unit);
#pragma unroll
            for (int r = 0; r < R / 32; r++) {
                int i = lane + 32 * r;
                col[i] = i < j ? 0.f : i == j ? 1.f : h.scaled(e[r]);  // zero above the diagonal
            }
            if (lane == 0) tau[j] = h.tau, diag[j] = h.beta;
        }
        MC_BARRIER();  // one per reflector: it is not written again
        float t = tau[j];
        if (t != 0.f && c > j && c < n) qr_col_reflect(x, vj, j, m, t);
    }
    MC_GLOBAL T* rout = (MC_GLOBAL T*)r_ + b * rr * n;
    if (c < n)
#pragma unroll
        for (int i = 0; i < R; i++)
            if (i < rr) D::store(rout + i * n + c, i > c || i >= k ? 0.f : i == c ? diag[c] : x[i]);
    if (!q_) return;
        // q = H_0 ... H_k-1 applied to the identity's first qc columns, last
        // reflector first; H_j changes only columns from j.
#pragma unroll
    for (int i = 0; i < R; i++) x[i] = i == c ? 1.f : 0.f;
    int j = k - 1;
    for (; j >= 1; j -= 2)
        if (c >= j - 1 && c < qc) qr_col_reflect2(x, V + (j - 1) * (R / 4), j - 1, m, tau[j - 1], tau[j]);
    if (j == 0 && c < qc) qr_col_reflect(x, V, 0, m, tau[0]);
    MC_GLOBAL T* q = (MC_GLOBAL T*)q_ + b * m * qc;
    if (c < qc)
#pragma unroll
        for (int i = 0; i < R; i++)
            if (i < m) D::store(q + i * qc + c, x[i]);
}
#define MC_QR_COLS(R)                                                                                 \
    template <class D>                                                                                \
    MC_DEVICE void qr_cols##R(MC_IDS, MC_GROUP float4* V, MC_GLOBAL const void* a, MC_GLOBAL void* q, \
                              MC_GLOBAL void* r, int m, int n, int qc, int rr) {                      \
        qr_cols<D, R>(id, V, a, q, r, m, n, qc, rr);                                                  \
    }
MC_QR_COLS(32)
MC_QR_COLS(64)
MC_QR_COLS(128)
#define MC_QR_COLS_PARAMS (MC_GLOBAL const void* a, MC_GLOBAL void* q, MC_GLOBAL void* r, int m, int n, int qc, int rr)
#define MC_QR_COLS_ARGS (a, q, r, m, n, qc, rr)
MC_INSTANTIATE_DYNAMIC(qr_cols32, float4, , MC_QR_COLS_PARAMS, MC_QR_COLS_ARGS)
MC_INSTANTIATE_DYNAMIC(qr_cols64, float4, , MC_QR_COLS_PARAMS, MC_QR_COLS_ARGS)
// 128 rows: 3 blocks of 128 threads a multiprocessor need <= 170 registers
// (the compiler's own choice, 170, rounds to 176 a thread: 2 blocks).
MC_INSTANTIATE_DYNAMIC(qr_cols128, float4, MC_BOUNDS(128, 3), MC_QR_COLS_PARAMS, MC_QR_COLS_ARGS)

// ---- blocked, in the workspace ---------------------------------------------

// qr_load: w = a (column-major per matrix), qw = the m x qc identity when
// given, and the panel groups' barrier counters zeroed.
template <class D>
MC_DEVICE void qr_load(MC_IDS, MC_GLOBAL const void* a_, MC_GLOBAL float* w, MC_GLOBAL float* qw,
                       MC_GLOBAL unsigned* counters, int batch, int m, int n, int qc) {
    MC_GLOBAL const typename D::T* a = (MC_GLOBAL const typename D::T*)a_;
    mc_i64 mn = (mc_i64)m * n, stride = MC_NBLOCKS * MC_NTHREADS;
    for (mc_i64 e = MC_BLOCK * MC_NTHREADS + MC_TID; e < batch; e += stride) counters[e] = 0;
    for (mc_i64 e = MC_BLOCK * MC_NTHREADS + MC_TID; e < batch * mn; e += stride) {
        mc_i64 b = e / mn;
        int i = (int)(e % mn / n), j = (int)(e % n);
        w[b * mn + (mc_i64)j * m + i] = D::load(a + e);
    }
    if (!qw) return;
    mc_i64 mq = (mc_i64)m * qc;
    for (mc_i64 e = MC_BLOCK * MC_NTHREADS + MC_TID; e < batch * mq; e += stride) {
        int i = (int)(e % m), c = (int)(e % mq / m);
        qw[e] = i == c ? 1.f : 0.f;
    }
}
MC_INSTANTIATE(qr_load,
               (MC_GLOBAL const void* a, MC_GLOBAL float* w, MC_GLOBAL float* qw, MC_GLOBAL unsigned* counters,
                int batch, int m, int n, int qc),
               (a, w, qw, counters, batch, m, n, qc))

// qr_store: r (upper triangle of w, zeros below) and q from qw, row-major in
// the dtype.
template <class D>
MC_DEVICE void qr_store(MC_IDS, MC_GLOBAL const float* w, MC_GLOBAL const float* qw, MC_GLOBAL void* q_,
                        MC_GLOBAL void* r_, int batch, int m, int n, int qc, int rr) {
    typedef typename D::T T;
    int k = min(m, n);
    mc_i64 stride = MC_NBLOCKS * MC_NTHREADS, rn = (mc_i64)rr * n, mn = (mc_i64)m * n;
    for (mc_i64 e = MC_BLOCK * MC_NTHREADS + MC_TID; e < batch * rn; e += stride) {
        mc_i64 b = e / rn;
        int i = (int)(e % rn / n), j = (int)(e % n);
        D::store((MC_GLOBAL T*)r_ + e, i <= j && i < k ? w[b * mn + (mc_i64)j * m + i] : 0.f);
    }
    if (!q_) return;
    mc_i64 mq = (mc_i64)m * qc;
    for (mc_i64 e = MC_BLOCK * MC_NTHREADS + MC_TID; e < batch * mq; e += stride) {
        mc_i64 b = e / mq;
        int i = (int)(e % mq / qc), c = (int)(e % qc);
        D::store((MC_GLOBAL T*)q_ + e, qw[b * mq + (mc_i64)c * m + i]);
    }
}
MC_INSTANTIATE(qr_store,
               (MC_GLOBAL const float* w, MC_GLOBAL const float* qw, MC_GLOBAL void* q, MC_GLOBAL void* r, int batch,
                int m, int n, int qc, int rr),
               (w, qw, q, r, batch, m, n, qc, rr))

// qr_panel factors columns k0 .. k0+jb-1 (rows k0 ..) of every matrix of w,
// leaving the reflectors below the diagonal, and writes the panel's upper
// triangular T (I - V T V^T = H_0 ... H_jb-1) to Tp. `groups` blocks share
// a matrix, each owning a slice of the rows. Per column c, one pass over the
// slice sums x_i^2 and x_i A[i][d] for the other panel columns (d > j: the
// reflector's products with the columns it updates; d < j: the earlier
// reflectors, which give T); the block owning row c adds that row. The
// group exchanges these through part (two slots, alternating by column),
// and each block updates its slice. Totals add in block order:
// deterministic. The counter's arrivals before this launch are `base`.
//
// REG: the slice has at most one row a thread, and the thread holds its
// row's panel entries in registers for the whole panel (qr_panel_reg);
// otherwise the rows are read from and written to w (qr_panel).
#define QR_SLOT (2 * QR_NB + 2)  // x^2, 32 sums, unused, row c's 32 values
// The panel is scaled to entries below 1 (see amax), and a column's squares
// are summed as multiples of 2^-QR_UNIT (Reflector): each square is below
// 2^80, and only a column whose every entry is below 2^-103 of the panel's
// largest (which then counts as zero) underflows.
#define QR_UNIT 40
#define QR_UNIT_SCALE 1099511627776.f  // 2^QR_UNIT

// a[j] for j known only at run time, without indexing the register array
// by it (which would move the array to local memory).
MC_DEVICE float qr_pick(MC_THREAD const float (&a)[QR_NB], int j) {
    float v = 0.f;
#pragma unroll
    for (int d = 0; d < QR_NB; d++)
        if (d == j) v = a[d];
    return v;
}

// The panel's entries of a row: held in registers (REG), or in w.
struct QrRegRow {
    MC_THREAD const float (&a)[QR_NB];
    MC_METHOD float operator()(int d) const { return a[d]; }
};
struct QrMemRow {
    MC_GLOBAL const float* A;  // the panel's first column, rows from 0
    mc_i64 m;
    int i;
    MC_METHOD float operator()(int d) const { return A[d * m + i]; }
};
// adds row i's terms to column j's sums: (x_i 2^QR_UNIT)^2 to ss, and
// x_i A[i][d] to p[d] for the panel's other columns
template <class E>
MC_DEVICE void qr_row_sums(float xi, E entry, int j, int jb, MC_THREAD float& ss, MC_THREAD float (&p)[32]) {
    float xs = xi * QR_UNIT_SCALE;
    ss += xs * xs;
#pragma unroll
    for (int d = 0; d < 32; d++)
        if (d < jb && d != j) p[d] += xi * entry(d);
}

// qr_panel's shared memory, declared in its entries
struct QrPanelShared {
    float gram[QR_NB][QR_NB + 1];
    float red[32][33];
    float rowc[QR_NB];
    float wred[32], tot[QR_SLOT], tau[QR_NB];
};

template <bool REG>
MC_DEVICE void qr_panel_factor(MC_IDS, MC_GROUP QrPanelShared& sh, MC_GLOBAL float* w, MC_GLOBAL float* Tp,
                               MC_GLOBAL float* part, MC_GLOBAL unsigned* counters, unsigned base, int m, int n, int k0,
                               int jb, int npanels, int groups) {
    int tid = MC_TID, nt = MC_NTHREADS, warp = tid >> 5, lane = tid & 31, nw = nt >> 5;
    mc_i64 b = MC_BLOCK / groups;
    int g = (int)(MC_BLOCK % groups);
    int per = (m - k0 + groups - 1) / groups, lo = k0 + g * per, hi = min(m, lo + per);
    MC_GLOBAL float* A = w + b * m * n;
    MC_GLOBAL float* P = A + (mc_i64)k0 * m;  // the panel: entry (i, d) at P[d * m + i]
    MC_GLOBAL float* pb = part + b * 2 * groups * QR_SLOT;
    float a[QR_NB];  // REG: row lo + tid's entries (zeros past jb or hi)
    int ri = lo + tid;
    bool mine = REG && ri < hi;
    if (REG) {
#pragma unroll
        for (int d = 0; d < QR_NB; d++) a[d] = mine && d < jb ? P[(mc_i64)d * m + ri] : 0.f;
    }
    // The panel is first scaled by the power of two that brings its largest
    // entry to [0.5, 1): exact, and the reflectors and T do not change, so
    // the products below are float sums even for entries of 1e-30 or 1e30.
    // r's part (rows up to the diagonal) is scaled back at the end.
    float amax = 0.f;
    if (REG) {
#pragma unroll
        for (int d = 0; d < QR_NB; d++) amax = fmaxf(amax, fabsf(a[d]));
    } else {
        for (int i = lo + tid; i < hi; i += nt)
            for (int d = 0; d < jb; d++) amax = fmaxf(amax, fabsf(P[(mc_i64)d * m + i]));
    }
    amax = mc_warp_max(amax);
    if (lane == 0) sh.wred[warp] = amax;
    MC_BARRIER();
    if (tid == 0) {
        float t = 0.f;
        for (int u = 0; u < nw; u++) t = fmaxf(t, sh.wred[u]);
        pb[(groups + g) * QR_SLOT] = t;  // slot 1: the loop's first use of it comes after every block read this
    }
    if (groups > 1) mc_blocks_sync(id, counters + b, base + (unsigned)groups);
    else MC_BARRIER_DEVICE();  // thread 0's device writes reach the group
    for (int h = 0; h < groups; h++) amax = fmaxf(amax, mc_load_coherent(pb + (groups + h) * QR_SLOT));
    int e2 = 0;
    if (amax > 0.f && amax <= 3.4e38f) frexpf(amax, &e2);
    float up = ldexpf(1.f, -e2);
    if (REG) {
#pragma unroll
        for (int d = 0; d < QR_NB; d++) a[d] *= up;
    } else {
        for (int i = lo + tid; i < hi; i += nt)
            for (int d = 0; d < jb; d++) P[(mc_i64)d * m + i] *= up;
    }
    // A thread keeps its rows (lo + tid, + nt, ...) for the whole panel, so
    // it reads only what it wrote itself; row c's values reach the group
    // through the exchange.
    for (int j = 0; j < jb; j++) {
        int c = k0 + j;
        MC_GLOBAL float* x = A + (mc_i64)c * m;
        float p[32];
        float ss = 0.f;
#pragma unroll
        for (int d = 0; d < 32; d++) p[d] = 0.f;
        if (REG) {
            if (mine && ri > c) {
                QrRegRow row = {a};
                qr_row_sums(qr_pick(a, j), row, j, jb, ss, p);
            }
            if (mine && ri == c)
#pragma unroll
                for (int d = 0; d < QR_NB; d++) sh.rowc[d] = a[d];
        } else {
            for (int i = lo + tid; i < hi; i += nt)
                if (i > c) {
                    QrMemRow row = {P, m, i};
                    qr_row_sums(x[i], row, j, jb, ss, p);
                }
        }
        qr_warp_sums<16>(p, lane);
        sh.red[warp][lane] = p[0];
        ss = mc_warp_sum(ss);
        if (lane == 0) sh.wred[warp] = ss;
        MC_BARRIER_DEVICE();  // row c of P (the memory path) is read by every thread below
        MC_GLOBAL float* slot = pb + ((j & 1) * groups + g) * QR_SLOT;
        for (int v = tid; v < QR_SLOT; v += nt) {
            float t = 0.f;
            int d = v - QR_NB - 2;
            if (v <= QR_NB) {
                for (int u = 0; u < nw; u++) t += v == 0 ? sh.wred[u] : sh.red[u][v - 1];
            } else if (d >= 0 && d < jb && lo <= c && c < hi) {
                t = REG ? sh.rowc[d] : P[(mc_i64)d * m + c];
            }
            slot[v] = t;
        }
        if (groups > 1) mc_blocks_sync(id, counters + b, base + (unsigned)((j + 2) * groups));
        else MC_BARRIER_DEVICE();  // thread 0's device writes reach the group
        // totals over the group, value v by thread v, read past L1 (other
        // blocks wrote them), all loads in flight together
        MC_GLOBAL const float* all = pb + (j & 1) * groups * QR_SLOT;
        for (int v = tid; v < QR_SLOT; v += nt) {
            float t = 0.f;
#pragma unroll 8
            for (int h = 0; h < groups; h++) t += mc_load_coherent(all + h * QR_SLOT + v);
            sh.tot[v] = t;
        }
        MC_BARRIER();
        // every thread derives the reflector and its products itself
        MC_GROUP const float* rowc = sh.tot + QR_NB + 2;
        Reflector h(rowc[j], sh.tot[0], -QR_UNIT);
        float coef[32];  // d > j: tau (v_j . column d); d < j: v_d . v_j
#pragma unroll
        for (int d = 0; d < 32; d++) coef[d] = (rowc[d] + h.scaled(sh.tot[1 + d])) * (d > j ? h.tau : 1.f);
        if (tid == 0) sh.tau[j] = h.tau;
        if (tid < j) sh.gram[tid][j] = rowc[tid] + h.scaled(sh.tot[1 + tid]);
        // row i's update: x_i becomes the reflector's entry (beta on row c),
        // the later columns lose that times coef (row c: coef itself)
        if (REG) {
            if (mine && ri >= c) {
                float xi = ri == c ? h.beta : h.scaled(qr_pick(a, j)), f = ri == c ? 1.f : xi;
#pragma unroll
                for (int d = 0; d < QR_NB; d++) {
                    if (d == j) a[d] = xi;
                    else if (d > j && d < jb) a[d] -= f * coef[d];
                }
            }
        } else {
            for (int i = lo + tid; i < hi; i += nt) {
                if (i < c) continue;
                float xi = i == c ? h.beta : h.scaled(x[i]), f = i == c ? 1.f : xi;
                x[i] = xi;
#pragma unroll
                for (int d = 0; d < 32; d++)
                    if (d > j && d < jb) P[(mc_i64)d * m + i] -= f * coef[d];
            }
        }
    }
    if (REG) {
        if (mine) {
#pragma unroll
            for (int d = 0; d < QR_NB; d++)  // r's rows scaled back
                if (d < jb) P[(mc_i64)d * m + ri] = ri < k0 + jb && d >= ri - k0 ? a[d] / up : a[d];
        }
    } else {
        for (int i = lo + tid; i < hi && i < k0 + jb; i += nt)  // r's rows, this thread's own
            for (int d = i - k0; d < jb; d++) P[(mc_i64)d * m + i] /= up;
    }
    MC_BARRIER();
    if (g != 0) return;
    // T (LAPACK's slarft, forward columnwise): T[j][j] = tau_j,
    // T[0:j, j] = -tau_j T[0:j, 0:j] gram[0:j, j]; built over gram's upper part.
    for (int j = 0; j < jb; j++) {
        if (tid < j) sh.red[0][tid] = sh.gram[tid][j];
        MC_BARRIER();
        if (tid < j) {
            float s = 0.f;
            for (int q = tid; q < j; q++) s += sh.gram[tid][q] * sh.red[0][q];
            sh.gram[tid][j] = -sh.tau[j] * s;
        }
        if (tid == j) sh.gram[j][j] = sh.tau[j];
        MC_BARRIER();
    }
    MC_GLOBAL float* Tg = Tp + (b * npanels + k0 / QR_NB) * QR_NB * QR_NB;
    for (int e = tid; e < QR_NB * QR_NB; e += nt) {
        int i = e / QR_NB, j = e % QR_NB;
        Tg[e] = i < jb && j < jb && i <= j ? sh.gram[i][j] : 0.f;
    }
}
#define MC_QR_PANEL_PARAMS                                                                                        \
    (MC_GLOBAL float* w, MC_GLOBAL float* Tp, MC_GLOBAL float* part, MC_GLOBAL unsigned* counters, unsigned base, \
     int m, int n, int k0, int jb, int npanels, int groups)
#define MC_QR_PANEL_ARGS (w, Tp, part, counters, base, m, n, k0, jb, npanels, groups)
#define MC_QR_PANEL(NAME, REG)                                                                    \
    MC_DEVICE void NAME##_impl MC_IMPL_PARAMS(QrPanelShared, MC_QR_PANEL_PARAMS) {                \
        qr_panel_factor<REG>(id, sh, w, Tp, part, counters, base, m, n, k0, jb, npanels, groups); \
    }
MC_QR_PANEL(qr_panel, false)
MC_QR_PANEL(qr_panel_reg, true)
MC_ENTRY_GROUP(qr_panel, QrPanelShared, MC_QR_PANEL_PARAMS, MC_QR_PANEL_ARGS)
MC_ENTRY_GROUP(qr_panel_reg, QrPanelShared, MC_QR_PANEL_PARAMS, MC_QR_PANEL_ARGS)

// Entry i of reflector column c (row c holds its implicit 1; rows above, 0).
MC_DEVICE float qr_v(MC_GLOBAL const float* A, int m, int c, int i) {
    return i < c ? 0.f : i == c ? 1.f : A[(mc_i64)c * m + i];
}

// qr_vtw: the partial products Y_s = V^T C over columns c0 .. c0+nct-1 of C
// and split s of its rows (row chunks of 32 from k0, every splits-th), for
// the panel at k0. One block of 256 threads per (matrix, split, 128
// columns), a thread 4 rows of Y by 4 columns; Y_s goes to Yp, QR_NB rows of
// ldw floats per (matrix, split).
struct QrVtwShared {
    MC_ALIGN(16) float Vs[32][36];  // rows of 36: 16-byte aligned groups of 4
    float Cs[32][129];
};
#define MC_QR_VTW_PARAMS                                                                                            \
    (MC_GLOBAL const float* w, MC_GLOBAL const float* C, MC_GLOBAL float* Yp, int m, int n, mc_i64 cstride, int k0, \
     int jb, int c0, int nct, int splits, int ldw)
MC_DEVICE void qr_vtw_impl MC_IMPL_PARAMS(QrVtwShared, MC_QR_VTW_PARAMS) {
    int tid = MC_TID, cc = tid & 31, g = tid >> 5;
    int tiles = (nct + 127) / 128;
    mc_i64 bs = MC_BLOCK / tiles;  // matrix * splits + split
    mc_i64 b = bs / splits;
    int split = (int)(bs % splits);
    int ct = c0 + (int)(MC_BLOCK % tiles) * 128, cend = c0 + nct;
    MC_GLOBAL const float* A = w + b * m * n;
    MC_GLOBAL const float* Cb = C + b * cstride;
    float y[4][4] = {};
    for (int r0 = k0 + 32 * split; r0 < m; r0 += 32 * splits) {
        for (int e = tid; e < 1024; e += 256) {
            int j = e >> 5, i = e & 31, row = r0 + i;
            sh.Vs[i][j] = row < m && j < jb ? qr_v(A, m, k0 + j, row) : 0.f;
        }
        for (int e = tid; e < 4096; e += 256) {
            int col = e >> 5, i = e & 31, row = r0 + i;
            sh.Cs[i][col] = row < m && ct + col < cend ? Cb[(mc_i64)(ct + col) * m + row] : 0.f;
        }
        MC_BARRIER();
#pragma unroll 8
        for (int i = 0; i < 32; i++) {
            float4 v = *(MC_GROUP const float4*)&sh.Vs[i][4 * g];
            float vv[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
            for (int q = 0; q < 4; q++) {
                float c = sh.Cs[i][cc + 32 * q];
#pragma unroll
                for (int a = 0; a < 4; a++) y[a][q] += vv[a] * c;
            }
        }
        MC_BARRIER();
    }
    MC_GLOBAL float* Yb = Yp + bs * QR_NB * ldw;
#pragma unroll
    for (int a = 0; a < 4; a++)
#pragma unroll
        for (int q = 0; q < 4; q++) {
            int jj = 4 * g + a, col = ct + cc + 32 * q;
            if (jj < jb && col < cend) Yb[(mc_i64)jj * ldw + col] = y[a][q];
        }
}
MC_ENTRY_GROUP(qr_vtw, QrVtwShared, MC_QR_VTW_PARAMS, (w, C, Yp, m, n, cstride, k0, jb, c0, nct, splits, ldw))

// qr_wsum: W = op(T) (sum over splits of Y_s), op(T) = T^T when trans (the
// factorization applies H^T; forming q applies H). One block of 256
// threads per 32 columns.
struct QrWsumShared {
    float T[QR_NB][QR_NB + 1], Y[QR_NB][33];
};
#define MC_QR_WSUM_PARAMS                                                                                       \
    (MC_GLOBAL const float* Yp, MC_GLOBAL const float* Tp, MC_GLOBAL float* W, int k0, int jb, int c0, int nct, \
     int splits, int npanels, int ldw, int trans)
MC_DEVICE void qr_wsum_impl MC_IMPL_PARAMS(QrWsumShared, MC_QR_WSUM_PARAMS) {
    int tid = MC_TID, cc = tid & 31, g = tid >> 5;
    int tiles = (nct + 31) / 32;
    mc_i64 b = MC_BLOCK / tiles;
    int c = c0 + (int)(MC_BLOCK % tiles) * 32 + cc;
    bool in = c < c0 + nct;
    MC_GLOBAL const float* Tg = Tp + (b * npanels + k0 / QR_NB) * QR_NB * QR_NB;
    for (int e = tid; e < QR_NB * QR_NB; e += 256) sh.T[e / QR_NB][e % QR_NB] = Tg[e];
#pragma unroll
    for (int q = 0; q < 4; q++) {
        int p = g + 8 * q;
        float y = 0.f;
        if (in && p < jb)
            for (int s = 0; s < splits; s++) y += Yp[((b * splits + s) * QR_NB + p) * ldw + c];
        sh.Y[p][cc] = y;
    }
    MC_BARRIER();
    if (!in) return;
    MC_GLOBAL float* Wb = W + b * QR_NB * ldw;
#pragma unroll
    for (int q = 0; q < 4; q++) {
        int r = g + 8 * q;
        if (r >= jb) continue;
        float s = 0.f;
        for (int p = 0; p < jb; p++) s += (trans ? sh.T[p][r] : sh.T[r][p]) * sh.Y[p][cc];
        Wb[(mc_i64)r * ldw + c] = s;
    }
}
MC_ENTRY_GROUP(qr_wsum, QrWsumShared, MC_QR_WSUM_PARAMS, (Yp, Tp, W, k0, jb, c0, nct, splits, npanels, ldw, trans))

// qr_update: C -= V W over rows k0 .. m-1 and columns c0 .. c0+nct-1; one
// block of 256 threads per 64 x 64 tile, 4 x 4 values a thread.
struct QrUpdateShared {
    float Vs[64][33], Ws[32][65];
};
#define MC_QR_UPDATE_PARAMS                                                                                        \
    (MC_GLOBAL const float* w, MC_GLOBAL const float* W, MC_GLOBAL float* C, int m, int n, mc_i64 cstride, int k0, \
     int jb, int c0, int nct, int ldw)
MC_DEVICE void qr_update_impl MC_IMPL_PARAMS(QrUpdateShared, MC_QR_UPDATE_PARAMS) {
    int tid = MC_TID, ri = tid & 15, ci = tid >> 4;
    int rtiles = (m - k0 + 63) / 64, ctiles = (nct + 63) / 64;
    mc_i64 b = MC_BLOCK / (rtiles * ctiles);
    int t = (int)(MC_BLOCK % (rtiles * ctiles));
    int r0 = k0 + t / ctiles * 64, cb = c0 + t % ctiles * 64, cend = c0 + nct;
    MC_GLOBAL const float* A = w + b * m * n;
    MC_GLOBAL const float* Wb = W + b * QR_NB * ldw;
    for (int e = tid; e < 64 * 32; e += 256) {
        int j = e >> 6, i = e & 63, row = r0 + i;
        sh.Vs[i][j] = row < m && j < jb ? qr_v(A, m, k0 + j, row) : 0.f;
        sh.Ws[j][i] = j < jb && cb + i < cend ? Wb[(mc_i64)j * ldw + cb + i] : 0.f;
    }
    MC_BARRIER();
    float acc[4][4] = {};
    for (int j = 0; j < jb; j++) {
        float v[4], x[4];
#pragma unroll
        for (int a = 0; a < 4; a++) v[a] = sh.Vs[ri + 16 * a][j], x[a] = sh.Ws[j][ci + 16 * a];
#pragma unroll
        for (int a = 0; a < 4; a++)
#pragma unroll
            for (int c = 0; c < 4; c++) acc[a][c] += v[a] * x[c];
    }
    MC_GLOBAL float* Cb = C + b * cstride;
#pragma unroll
    for (int c = 0; c < 4; c++) {
        int col = cb + ci + 16 * c;
        if (col >= cend) continue;
#pragma unroll
        for (int a = 0; a < 4; a++) {
            int row = r0 + ri + 16 * a;
            if (row < m) Cb[(mc_i64)col * m + row] -= acc[a][c];
        }
    }
}
MC_ENTRY_GROUP(qr_update, QrUpdateShared, MC_QR_UPDATE_PARAMS, (w, W, C, m, n, cstride, k0, jb, c0, nct, ldw))
