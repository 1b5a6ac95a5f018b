// The GPU kernels' shared helpers, in the dialect CUDA and MSL both compile
// (C++14, an address space on every pointer and reference, nothing
// backend-specific): each backend's prelude defines the names used here
// (MC_*, mc_shfl_xor, the element types F32, F16, BF16), and a kernel
// program is that prelude, then this file, then an op family's source.

// 16-byte vectors: VEC elements of D per load.
template <class D> struct Vec {
    enum { N = 16 / sizeof(typename D::T) };
    MC_DEVICE void load(MC_GLOBAL const typename D::T* p, MC_THREAD float* out) {
        unpack(*(MC_GLOBAL const uint4*)p, out);
    }
    // unpack converts a piece already loaded (raw) to float
    MC_DEVICE void unpack(uint4 raw, MC_THREAD float* out) {
        MC_THREAD const typename D::T* e = (MC_THREAD const typename D::T*)&raw;
#pragma unroll
        for (int j = 0; j < N; j++) out[j] = D::unpack(e[j]);
    }
    MC_DEVICE void store(MC_GLOBAL typename D::T* p, MC_THREAD const float* in) {
        uint4 raw;
        MC_THREAD typename D::T* e = (MC_THREAD typename D::T*)&raw;
#pragma unroll
        for (int j = 0; j < N; j++) e[j] = D::pack(in[j]);
        *(MC_GLOBAL uint4*)p = raw;
    }
};

// Sums and maxima over each aligned group of `lanes` lanes of a warp (a
// power of two up to 32), every lane of the warp taking part; over the
// whole warp, mc_warp_sum and mc_warp_max (a constant count the compiler
// unrolls).
MC_DEVICE float mc_group_sum(float v, int lanes) {
#pragma unroll
    for (int o = lanes >> 1; o > 0; o >>= 1) v += mc_shfl_xor(v, o);
    return v;
}
MC_DEVICE float mc_group_max(float v, int lanes) {
#pragma unroll
    for (int o = lanes >> 1; o > 0; o >>= 1) v = fmaxf(v, mc_shfl_xor(v, o));
    return v;
}
MC_DEVICE float mc_warp_sum(float v) { return mc_group_sum(v, 32); }
MC_DEVICE float mc_warp_max(float v) { return mc_group_max(v, 32); }

// The shared memory (floats) mc_block_sum and mc_block_max, and
// mc_block_sum2, take as scratch: a kernel's MC_INSTANTIATE_GROUP size.
#define MC_BLOCK_SUM_SCRATCH 33
#define MC_BLOCK_SUM2_SCRATCH 66

// Block-wide reductions; every thread gets the result. scratch holds 33
// floats of shared memory.
MC_DEVICE float mc_block_sum(MC_IDS, float v, MC_GROUP float* scratch) {
    v = mc_warp_sum(v);
    if (MC_NTHREADS == 32) return v;  // one warp: no shared memory, no barriers
    int warp = MC_TID >> 5, lane = MC_TID & 31, nwarps = (MC_NTHREADS + 31) >> 5;
    MC_BARRIER();
    if (lane == 0) scratch[warp] = v;
    MC_BARRIER();
    v = lane < nwarps ? scratch[lane] : 0.f;
    v = mc_warp_sum(v);
    return v;
}
// mc_block_sum2 sums a and b over the block with one pair of barriers;
// scratch holds 66 floats.
MC_DEVICE void mc_block_sum2(MC_IDS, MC_THREAD float& a, MC_THREAD float& b, MC_GROUP float* scratch) {
    a = mc_warp_sum(a);
    b = mc_warp_sum(b);
    if (MC_NTHREADS == 32) return;
    int warp = MC_TID >> 5, lane = MC_TID & 31, nwarps = (MC_NTHREADS + 31) >> 5;
    MC_BARRIER();
    if (lane == 0) scratch[warp] = a, scratch[33 + warp] = b;
    MC_BARRIER();
    a = mc_warp_sum(lane < nwarps ? scratch[lane] : 0.f);
    b = mc_warp_sum(lane < nwarps ? scratch[33 + lane] : 0.f);
}
MC_DEVICE float mc_block_max(MC_IDS, float v, MC_GROUP float* scratch) {
    v = mc_warp_max(v);
    if (MC_NTHREADS == 32) return v;
    int warp = MC_TID >> 5, lane = MC_TID & 31, nwarps = (MC_NTHREADS + 31) >> 5;
    MC_BARRIER();
    if (lane == 0) scratch[warp] = v;
    MC_BARRIER();
    v = lane < nwarps ? scratch[lane] : -mc_inf();
    v = mc_warp_max(v);
    return v;
}

// Row kernels read a row in 16-byte pieces: piece k of thread t covers
// elements [(k*threads + t)*N, +N). A row whose start is 16-byte aligned and
// whose width is a multiple of N moves whole vectors; any other row goes
// element by element with the same layout.
MC_DEVICE bool mc_aligned(MC_GLOBAL const void* q, int cols, int n) { return ((mc_u64)q % 16) == 0 && cols % n == 0; }
MC_DEVICE int mc_piece_start(MC_IDS, int k, int n) { return (k * MC_NTHREADS + MC_TID) * n; }

template <class D>
MC_DEVICE void mc_fetch(MC_GLOBAL const typename D::T* p, int cols, bool vec, int s, MC_THREAD float* out) {
    enum { N = Vec<D>::N };
    if (vec) {
        if (s < cols) Vec<D>::load(p + s, out);
        else
            for (int j = 0; j < N; j++) out[j] = 0.f;
        return;
    }
#pragma unroll
    for (int j = 0; j < N; j++) out[j] = s + j < cols ? D::load(p + s + j) : 0.f;
}

template <class D>
MC_DEVICE void mc_store(MC_GLOBAL typename D::T* q, int cols, bool vec, int s, MC_THREAD const float* val) {
    enum { N = Vec<D>::N };
    if (vec) {
        if (s < cols) Vec<D>::store(q + s, val);
        return;
    }
#pragma unroll
    for (int j = 0; j < N; j++)
        if (s + j < cols) D::store(q + s + j, val[j]);
}

#define MC_CACHE 4

// Ahead<D, C> holds the first C pieces of a row fetched before they are
// needed (raw, 4 registers a piece), so that their loads overlap other work.
template <class D, int C> struct Ahead {
    enum { N = Vec<D>::N };
    uint4 raw[C];
    bool have = false;
    // fetch starts loading the pieces of row, cols wide (when aligned)
    MC_METHOD void fetch(MC_IDS, MC_GLOBAL const typename D::T* row, int cols) {
        have = mc_aligned(row, cols, N);
#pragma unroll
        for (int k = 0; k < C; k++) {
            int s = mc_piece_start(id, k, N);
            if (have && s < cols) raw[k] = *(MC_GLOBAL const uint4*)(row + s);
        }
    }
    // get is piece k of the row at src (read as mc_fetch reads it): the one
    // fetched ahead, else loaded now
    MC_METHOD void get(MC_IDS, int k, MC_GLOBAL const typename D::T* src, int cols, bool vec,
                       MC_THREAD float* out) const {
        int s = mc_piece_start(id, k, N);
        if (have && s < cols) Vec<D>::unpack(raw[k], out);
        else mc_fetch<D>(src, cols, vec, s, out);
    }
};

// mc_for_rows calls f(r) for this block's rows: its own (a block per row,
// as straight-line code: a loop that runs once measured slower), or with
// `ahead` every MC_NBLOCKS-th row from MC_BLOCK (a wave of blocks).
template <bool ahead, class F> MC_DEVICE void mc_for_rows(MC_IDS, int rows, MC_THREAD F& f) {
    if (!ahead) f(MC_BLOCK);
    else
        for (mc_i64 r = MC_BLOCK; r < rows; r += MC_NBLOCKS) f(r);
}

// mc_row_stream passes pieces from, from + 1, ... of the row at src (cols
// wide, vec as mc_aligned says) to f, loading U of them before f sees the
// first, so that a thread has U loads in flight
template <class D, int U, class F>
MC_DEVICE void mc_row_stream(MC_IDS, MC_GLOBAL const typename D::T* src, int cols, bool vec, int from, MC_THREAD F& f) {
    enum { N = Vec<D>::N };
    int n = (cols + N * MC_NTHREADS - 1) / (N * MC_NTHREADS), k = from;
    for (; k + U <= n; k += U) {
        float t[U][N];
#pragma unroll
        for (int u = 0; u < U; u++) mc_fetch<D>(src, cols, vec, mc_piece_start(id, k + u, N), t[u]);
#pragma unroll
        for (int u = 0; u < U; u++) f(t[u], k + u, mc_piece_start(id, k + u, N));
    }
    for (; k < n; k++) {
        float t[N];
        int s = mc_piece_start(id, k, N);
        mc_fetch<D>(src, cols, vec, s, t);
        f(t, k, s);
    }
}

// Row<D, C> keeps the first C pieces of a row in registers, so later passes
// read no memory; wider rows re-read the rest (from source, which a kernel
// may point elsewhere, e.g. at what it wrote in the first pass).
//
// A pass over the row (mc_row_load, mc_row_each) calls a function object,
// f(values, k, s) for piece k starting at element s (values: N floats, zero
// past the row's end).
//
// A kernel taking several rows a block may fetch the cached pieces of its
// next row ahead, before it reduces this one.
template <class D, int C> struct Row {
    enum { N = Vec<D>::N };
    float v[C][N];
    Ahead<D, C> next;
    MC_GLOBAL const typename D::T* src;
    int cols;
    bool vec;
    MC_METHOD void init(MC_GLOBAL const typename D::T* row, int c) {
        src = row;
        cols = c;
        vec = mc_aligned(row, c, N);
    }
    MC_METHOD int pieces(MC_IDS) const { return (cols + N * MC_NTHREADS - 1) / (N * MC_NTHREADS); }
    // fetch_next: start loading the block's next row (r + MC_NBLOCKS of the
    // rows at base, stride apart), if there is one, for the next init
    MC_METHOD void fetch_next(MC_IDS, MC_GLOBAL const typename D::T* base, mc_i64 stride, mc_i64 r, int rows) {
        if (r + MC_NBLOCKS < rows) next.fetch(id, base + (r + MC_NBLOCKS) * stride, cols);
    }
    // rest: the pieces past the cache, read from src
    template <class F> MC_METHOD void rest(MC_IDS, MC_THREAD F& f) const {
        mc_row_stream<D, 2>(id, src, cols, vec, C, f);
    }
};

// mc_row_load: fetch every piece of the row (caching the first C; those
// fetched ahead come from registers) and pass it to f; mc_row_load_cached
// does so for the cached pieces alone. (Not methods of Row: a method's
// members are in no particular address space for MSL's stand-in check, and
// the cached pieces are the thread's.)
template <class D, int C, class F> MC_DEVICE void mc_row_load_cached(MC_IDS, MC_THREAD Row<D, C>& row, MC_THREAD F& f) {
    int n = row.pieces(id);
#pragma unroll
    for (int k = 0; k < C; k++)
        if (k < n) {
            row.next.get(id, k, row.src, row.cols, row.vec, row.v[k]);
            f(row.v[k], k, mc_piece_start(id, k, Row<D, C>::N));
        }
    row.next.have = false;
}
template <class D, int C, class F> MC_DEVICE void mc_row_load(MC_IDS, MC_THREAD Row<D, C>& row, MC_THREAD F& f) {
    mc_row_load_cached(id, row, f);
    row.rest(id, f);
}
// mc_row_each: pass every piece to f again, from registers where cached;
// mc_row_each_cached the cached pieces alone
template <class D, int C, class F> MC_DEVICE void mc_row_each_cached(MC_IDS, MC_THREAD Row<D, C>& row, MC_THREAD F& f) {
    int n = row.pieces(id);
#pragma unroll
    for (int k = 0; k < C; k++)
        if (k < n) f(row.v[k], k, mc_piece_start(id, k, Row<D, C>::N));
}
template <class D, int C, class F> MC_DEVICE void mc_row_each(MC_IDS, MC_THREAD Row<D, C>& row, MC_THREAD F& f) {
    mc_row_each_cached(id, row, f);
    row.rest(id, f);
}

// Exponentials: over mc_row_each, exp(x - m) in place (cached pieces keep
// the exponentials; a piece past the cache is read again from the row), and
// their sum (softmax, cross-entropy)
template <class D> struct Exponentials {
    enum { N = Vec<D>::N };
    int cols;
    float m, sum;
    MC_METHOD void operator()(MC_THREAD float* v, int, int s) {
        for (int j = 0; j < N; j++) {
            v[j] = s + j < cols ? expf(v[j] - m) : 0.f;
            sum += v[j];
        }
    }
};

// MC_IMPL_PARAMS(S, PARAMS): the parameters of an MC_ENTRY_GROUP kernel's
// NAME_impl: the ids, its shared memory (an S) as sh, then the kernel's
// PARAMS, a parenthesized list written once.
#define MC_UNPAREN(...) __VA_ARGS__
#define MC_IMPL_PARAMS(S, PARAMS) MC_IMPL_PARAMS_(S, MC_UNPAREN PARAMS)
#define MC_IMPL_PARAMS_(S, ...) (MC_IDS, MC_GROUP S & sh, __VA_ARGS__)

// The round-robin tournament of the Jacobi families (eigh, svd): players
// (even) indices, players - 1 steps, each step's players / 2 pairs
// disjoint, every two indices paired once. The index at position pos of
// step step: position 0 stays, the others turn ((pos - 1 + step) modulo
// players - 1, without a division).
MC_DEVICE int mc_player(int pos, int step, int players) {
    int x = pos - 1 + step;
    return pos == 0 ? 0 : (x >= players - 1 ? x - (players - 1) : x) + 1;
}

// Pair k of step step: p < q (past the real indices, q is a bye).
MC_DEVICE void mc_pair(int k, int step, int players, MC_THREAD int& p, MC_THREAD int& q) {
    int x = mc_player(k, step, players), y = mc_player(players - 1 - k, step, players);
    p = x < y ? x : y;
    q = x < y ? y : x;
}
