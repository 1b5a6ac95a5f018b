// metalcore kernel prelude (Metal side): the dialect's names in the Metal
// Shading Language, as backend/cuda/prelude.cuh defines them in CUDA C++. A
// kernel program is this prelude, then the dialect's shared helpers
// (backend/dialect/dialect.h), then an op family's source, then the kernel
// entries that metal.Program writes from the family's declaration lines.
#include <metal_stdlib>
using namespace metal;

#define MC_DEVICE static inline __attribute__((always_inline))
#define MC_METHOD inline __attribute__((always_inline))
#define MC_BARRIER() threadgroup_barrier(mem_flags::mem_threadgroup)
// a barrier that also orders the group's device memory accesses (Metal's
// threadgroup barrier orders only what its flags name)
#define MC_BARRIER_DEVICE() threadgroup_barrier(mem_flags::mem_device | mem_flags::mem_threadgroup)
#define MC_WARP_BARRIER() simdgroup_barrier(mem_flags::mem_threadgroup)
#define MC_GLOBAL device
#define MC_GROUP threadgroup
#define MC_THREAD thread
#define MC_CONSTANT constant
#define MC_ALIGN(bytes) alignas(bytes)
// MC_INLINE_BYTES: the most a kernel's arguments may take by value (an
// argument set with setBytes)
#define MC_INLINE_BYTES 4096

typedef ushort mc_u16;
typedef long mc_i64;
typedef ulong mc_u64;

// Thread and group indices, from the entry's attributes (one-dimensional
// dispatches).
struct mc_ids {
    uint t, nt, b, nb;
    MC_METHOD int tid() const { return (int)t; }
    MC_METHOD int nthreads() const { return (int)nt; }
    MC_METHOD mc_i64 block() const { return (mc_i64)b; }
    MC_METHOD mc_i64 nblocks() const { return (mc_i64)nb; }
};
#define MC_IDS MC_THREAD const mc_ids& id
#define MC_IDS_DECLARE (void)id  // an MC_ENTRY body's: id is its parameter here
#define MC_TID (id.tid())
#define MC_NTHREADS (id.nthreads())
#define MC_BLOCK (id.block())
#define MC_NBLOCKS (id.nblocks())

// lane l's v exchanged with lane l ^ o's, in the 32-wide SIMD group
template <class V>
MC_DEVICE V mc_shfl_xor(V v, int o) {
    return simd_shuffle_xor(v, (ushort)o);
}
template <class V>
MC_DEVICE V mc_shfl(V v, int from) {
    return simd_shuffle(v, (ushort)from);
}
MC_DEVICE float mc_inf() { return as_type<float>(0x7f800000u); }
// 2^e for e in [-126, 127], exactly
MC_DEVICE float mc_pow2(int e) { return as_type<float>((127 + e) << 23); }
// e with |x| = f 2^e, f in [0.5, 1), for normal x (frexp's); -126 for
// denormals and zero, 129 for infinities and NaN
MC_DEVICE int mc_exponent(float x) { return ((as_type<int>(x) >> 23) & 255) - 126; }

// The C math names the kernels use, with CUDA's meaning: the precise forms,
// and the fast ones behind CUDA's intrinsic names.
MC_DEVICE float expf(float x) { return precise::exp(x); }
MC_DEVICE float logf(float x) { return precise::log(x); }
MC_DEVICE float exp2f(float x) { return precise::exp2(x); }
MC_DEVICE float __expf(float x) { return fast::exp(x); }
MC_DEVICE float __fdividef(float a, float b) { return fast::divide(a, b); }
MC_DEVICE float sqrtf(float x) { return precise::sqrt(x); }
MC_DEVICE float rsqrtf(float x) { return precise::rsqrt(x); }
MC_DEVICE float powf(float x, float y) { return precise::pow(x, y); }
MC_DEVICE float fmaf(float a, float b, float c) { return fma(a, b, c); }
MC_DEVICE float fmaxf(float a, float b) { return fmax(a, b); }
MC_DEVICE float fminf(float a, float b) { return fmin(a, b); }
MC_DEVICE float fabsf(float x) { return fabs(x); }
MC_DEVICE float copysignf(float x, float y) { return copysign(x, y); }
MC_DEVICE float ldexpf(float x, int e) { return ldexp(x, e); }
MC_DEVICE float frexpf(float x, MC_THREAD int* e) { return frexp(x, *e); }
MC_DEVICE float4 make_float4(float a, float b, float c, float d) {
    float4 v;
    v.x = a, v.y = b, v.z = c, v.w = d;
    return v;
}

// Element types, as on CUDA: bfloat16 in storage as 16 bits, rounded to
// nearest even by integer arithmetic (no MSL 3.1 bfloat needed); NaN stays
// NaN.
struct F32 {
    typedef float T;
    MC_DEVICE float unpack(T v) { return v; }
    MC_DEVICE T pack(float v) { return v; }
    MC_DEVICE float load(MC_GLOBAL const T* p) { return *p; }
    MC_DEVICE void store(MC_GLOBAL T* p, float v) { *p = v; }
    MC_DEVICE float round(float v) { return v; }
};
struct BF16 {
    typedef mc_u16 T;
    MC_DEVICE float unpack(T v) { return as_type<float>(((uint)v) << 16); }
    MC_DEVICE T pack(float v) {
        uint u = as_type<uint>(v);
        if ((u & 0x7fffffffu) > 0x7f800000u) return (mc_u16)((u >> 16) | 0x40u);
        return (mc_u16)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    }
    MC_DEVICE float load(MC_GLOBAL const T* p) { return unpack(*p); }
    MC_DEVICE void store(MC_GLOBAL T* p, float v) { *p = pack(v); }
    MC_DEVICE float round(float v) { return unpack(pack(v)); }
};
struct F16 {
    typedef mc_u16 T;
    MC_DEVICE float unpack(T v) { return (float)as_type<half>(v); }
    MC_DEVICE T pack(float v) { return as_type<mc_u16>((half)v); }
    MC_DEVICE float load(MC_GLOBAL const T* p) { return unpack(*p); }
    MC_DEVICE void store(MC_GLOBAL T* p, float v) { *p = pack(v); }
    MC_DEVICE float round(float v) { return unpack(pack(v)); }
};

// Blocks that wait for each other: Metal does not promise that threadgroups
// of one dispatch run at once, so the Metal backend runs QR's panel with one
// threadgroup a matrix (groups = 1), where the wait is the threadgroup's
// barrier over device memory and the loads are plain.
MC_DEVICE float mc_load_coherent(MC_GLOBAL const float* p) { return *p; }
MC_DEVICE void mc_blocks_sync(MC_IDS, MC_GLOBAL unsigned* counter, unsigned target) {
    threadgroup_barrier(mem_flags::mem_device);
}

// Kernel declarations. Every kernel's entry is written by metal.Program from
// the family's declaration lines (MSL wants each parameter's buffer index
// and the thread indices as attributed parameters), so the lines themselves
// expand to nothing here; a kernel of one type with its body in the source
// becomes NAME_impl(id, params...), which its entry calls.
#define MC_IF(NAME) MC_IF_1
#define MC_IF_1(...) __VA_ARGS__
#define MC_INSTANTIATE(NAME, PARAMS, ARGS)
#define MC_INSTANTIATE_BOUNDS(NAME, BOUNDS, PARAMS, ARGS)
#define MC_INSTANTIATE_GROUP(NAME, FLOATS, BOUNDS, PARAMS, ARGS)
#define MC_INSTANTIATE_DYNAMIC(NAME, T, BOUNDS, PARAMS, ARGS)
#define MC_ENTRY_GROUP(NAME, S, PARAMS, ARGS)
#define MC_WITH_ID_PARAM(...) (MC_IDS, __VA_ARGS__)
#define MC_ENTRY(NAME, PARAMS) MC_DEVICE void NAME##_impl MC_WITH_ID_PARAM PARAMS
