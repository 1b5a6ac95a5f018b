// metalcore kernel prelude (CUDA side). Kernels are written against these
// names only (thread ids, barriers, warp sums, 16-bit loads and stores), so
// a Metal prelude can map the same bodies to MSL. No CUDA headers: NVRTC
// runs without a toolkit.
#define MC_KERNEL extern "C" __global__
#define MC_DEVICE static __device__ __forceinline__
#define MC_METHOD __device__ __forceinline__
#define MC_TID ((int)threadIdx.x)
#define MC_NTHREADS ((int)blockDim.x)
#define MC_BLOCK ((long long)blockIdx.x)
#define MC_NBLOCKS ((long long)gridDim.x)
#define MC_BARRIER() __syncthreads()
#define MC_WARP_BARRIER() __syncwarp()
#define MC_SHARED __shared__
// MC_SHARED_DYNAMIC(T, name): the block's dynamic shared memory as T name[]
#define MC_SHARED_DYNAMIC(T, name) extern __shared__ T name[]

typedef unsigned short mc_u16;
typedef long long mc_i64;

// Element types: T is the storage type, load/store convert to float32
// (16-bit stores round to nearest even; NaN stays NaN).
struct F32 {
    typedef float T;
    MC_DEVICE float load(const T* p) { return *p; }
    MC_DEVICE void store(T* p, float v) { *p = v; }
    MC_DEVICE float round(float v) { return v; }
};
struct BF16 {
    typedef mc_u16 T;
    MC_DEVICE float load(const T* p) { return __uint_as_float(((unsigned)*p) << 16); }
    MC_DEVICE void store(T* p, float v) {
#if __CUDA_ARCH__ >= 800
        mc_u16 h;  // the hardware rounds to nearest even and keeps NaN a NaN
        asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(v));
        *p = h;
#else
        unsigned u = __float_as_uint(v);
        if ((u & 0x7fffffffu) > 0x7f800000u) { *p = (mc_u16)((u >> 16) | 0x40u); return; }
        *p = (mc_u16)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
#endif
    }
    MC_DEVICE float round(float v) { T t; store(&t, v); return load(&t); }
};
struct F16 {
    typedef mc_u16 T;
    MC_DEVICE float load(const T* p) {
        float f;
        asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(*p));
        return f;
    }
    MC_DEVICE void store(T* p, float v) {
        mc_u16 h;
        asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
        *p = h;
    }
    MC_DEVICE float round(float v) { T t; store(&t, v); return load(&t); }
};

// 16-byte vectors: VEC elements of D per load.
template <class D> struct Vec {
    enum { N = 16 / sizeof(typename D::T) };
    MC_DEVICE void load(const typename D::T* p, float* out) { unpack(*(const uint4*)p, out); }
    // unpack converts a piece already loaded (raw) to float
    MC_DEVICE void unpack(uint4 raw, float* out) {
        const typename D::T* e = (const typename D::T*)&raw;
#pragma unroll
        for (int j = 0; j < N; j++) out[j] = D::load(e + j);
    }
    MC_DEVICE void store(typename D::T* p, const float* in) {
        uint4 raw;
        typename D::T* e = (typename D::T*)&raw;
#pragma unroll
        for (int j = 0; j < N; j++) D::store(e + j, in[j]);
        *(uint4*)p = raw;
    }
};

template <class V> MC_DEVICE V mc_warp_sum(V v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
MC_DEVICE float mc_warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Block-wide reductions; every thread gets the result. scratch holds 33
// floats of shared memory.
MC_DEVICE float mc_block_sum(float v, float* scratch) {
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
MC_DEVICE void mc_block_sum2(float& a, float& b, float* scratch) {
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
MC_DEVICE float mc_block_max(float v, float* scratch) {
    v = mc_warp_max(v);
    if (MC_NTHREADS == 32) return v;
    int warp = MC_TID >> 5, lane = MC_TID & 31, nwarps = (MC_NTHREADS + 31) >> 5;
    MC_BARRIER();
    if (lane == 0) scratch[warp] = v;
    MC_BARRIER();
    v = lane < nwarps ? scratch[lane] : -__int_as_float(0x7f800000);
    v = mc_warp_max(v);
    return v;
}

// Row kernels read a row in 16-byte pieces: piece k of thread t covers
// elements [(k*threads + t)*N, +N). A row whose start is 16-byte aligned and
// whose width is a multiple of N moves whole vectors; any other row goes
// element by element with the same layout.
MC_DEVICE bool mc_aligned(const void* q, int cols, int n) {
    return ((unsigned long long)q % 16) == 0 && cols % n == 0;
}
MC_DEVICE int mc_piece_start(int k, int n) { return (k * MC_NTHREADS + MC_TID) * n; }

template <class D> MC_DEVICE void mc_fetch(const typename D::T* p, int cols, bool vec, int s, float* out) {
    enum { N = Vec<D>::N };
    if (vec) {
        if (s < cols) Vec<D>::load(p + s, out);
        else for (int j = 0; j < N; j++) out[j] = 0.f;
        return;
    }
#pragma unroll
    for (int j = 0; j < N; j++) out[j] = s + j < cols ? D::load(p + s + j) : 0.f;
}

template <class D> MC_DEVICE void mc_store(typename D::T* q, int cols, bool vec, int s, const float* val) {
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
    MC_METHOD void fetch(const typename D::T* row, int cols) {
        have = mc_aligned(row, cols, N);
#pragma unroll
        for (int k = 0; k < C; k++)
            if (int s = mc_piece_start(k, N); have && s < cols) raw[k] = *(const uint4*)(row + s);
    }
    // get is piece k of the row at src (read as mc_fetch reads it): the one
    // fetched ahead, else loaded now
    MC_METHOD void get(int k, const typename D::T* src, int cols, bool vec, float* out) const {
        int s = mc_piece_start(k, N);
        if (have && s < cols) Vec<D>::unpack(raw[k], out);
        else mc_fetch<D>(src, cols, vec, s, out);
    }
};

// mc_for_rows calls row(r) for this block's rows: its own (a block per row,
// as straight-line code: a loop that runs once measured slower), or with
// `ahead` every MC_NBLOCKS-th row from MC_BLOCK (a wave of blocks).
template <bool ahead, class F> MC_DEVICE void mc_for_rows(int rows, F row) {
    if constexpr (!ahead) row((mc_i64)MC_BLOCK);
    else
        for (mc_i64 r = MC_BLOCK; r < rows; r += MC_NBLOCKS) row(r);
}

// Row<D, C> keeps the first C pieces of a row in registers, so later passes
// read no memory; wider rows re-read the rest (from source, which a kernel
// may point elsewhere, e.g. at what it wrote in the first pass).
//
// A kernel taking several rows a block may fetch the cached pieces of its
// next row ahead, before it reduces this one.
template <class D, int C> struct Row {
    enum { N = Vec<D>::N };
    float v[C][N];
    Ahead<D, C> next;
    const typename D::T* src;
    int cols;
    bool vec;
    MC_METHOD void init(const typename D::T* row, int c) { src = row; cols = c; vec = mc_aligned(row, c, N); }
    MC_METHOD int pieces() const { return (cols + N * MC_NTHREADS - 1) / (N * MC_NTHREADS); }
    MC_METHOD int start(int k) const { return mc_piece_start(k, N); }
    // fetch_next: start loading the block's next row (r + MC_NBLOCKS of the
    // rows at base, stride apart), if there is one, for the next init
    MC_METHOD void fetch_next(const typename D::T* base, mc_i64 stride, mc_i64 r, int rows) {
        if (r + MC_NBLOCKS < rows) next.fetch(base + (r + MC_NBLOCKS) * stride, cols);
    }
    // load: fetch every piece (caching the first C; those fetched ahead come
    // from registers) and call f(values, k)
    template <class F> MC_METHOD void load(F f) {
        int n = pieces();
#pragma unroll
        for (int k = 0; k < C; k++)
            if (k < n) {
                next.get(k, src, cols, vec, v[k]);
                f(v[k], k);
            }
        next.have = false;
        for (int k = C; k < n; k++) {
            float t[N];
            mc_fetch<D>(src, cols, vec, start(k), t);
            f(t, k);
        }
    }
    // each: call f(values, k) again, from registers where cached
    template <class F> MC_METHOD void each(F f) {
        int n = pieces();
#pragma unroll
        for (int k = 0; k < C; k++)
            if (k < n) f(v[k], k);
        for (int k = C; k < n; k++) {
            float t[N];
            mc_fetch<D>(src, cols, vec, start(k), t);
            f(t, k);
        }
    }
};

// Kernel selection. The library compiles each kernel as a program of its
// own (the prelude, its family's source, and MC_SELECT with
// MC_WANT_<kernel> defined as MC_PROBE()), so a first call compiles one
// kernel, not its family. MC_IF(kernel)(text) keeps text only for the
// selected kernel, or for every kernel where nothing is selected (the whole
// source at once, as the clang check and bench/registers.py compile it).
#define MC_PROBE() ~, 1
#define MC_SECOND(a, b, ...) b
#define MC_IS_PROBE(...) MC_SECOND(__VA_ARGS__, 0, 0)
#define MC_CAT(a, b) MC_CAT_(a, b)
#define MC_CAT_(a, b) a##b
#ifdef MC_SELECT
#define MC_WANTED(NAME) MC_IS_PROBE(MC_WANT_##NAME)
#else
#define MC_WANTED(NAME) 1
#endif
#define MC_IF_1(...) __VA_ARGS__
#define MC_IF_0(...)
#define MC_IF(NAME) MC_CAT(MC_IF_, MC_WANTED(NAME))

// MC_ENTRY(NAME)(params) { body }: a kernel of one type. One not selected
// becomes a template never instantiated: parsed, never compiled.
#define MC_ENTRY(NAME) MC_CAT(MC_ENTRY_, MC_WANTED(NAME)) NAME
#define MC_ENTRY_1 MC_KERNEL void
#define MC_ENTRY_0 template <int mc_unselected> static __device__ void

// One kernel per dtype: NAME_f32, NAME_f16, NAME_bf16, each calling
// NAME<D>(args...). BOUNDS: nothing, or __launch_bounds__(threads, blocks)
// where a kernel must keep to a register budget.
#define MC_INSTANTIATE_BOUNDS(NAME, BOUNDS, PARAMS, ARGS)                          \
    MC_IF(NAME##_f32)(MC_KERNEL void BOUNDS NAME##_f32 PARAMS { NAME<F32> ARGS; })    \
    MC_IF(NAME##_f16)(MC_KERNEL void BOUNDS NAME##_f16 PARAMS { NAME<F16> ARGS; })    \
    MC_IF(NAME##_bf16)(MC_KERNEL void BOUNDS NAME##_bf16 PARAMS { NAME<BF16> ARGS; })
#define MC_INSTANTIATE(NAME, PARAMS, ARGS) MC_INSTANTIATE_BOUNDS(NAME, , PARAMS, ARGS)
