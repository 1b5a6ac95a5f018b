// metalcore kernel prelude (CUDA side): the dialect's names (thread ids,
// address spaces, barriers, shuffles, atomics, element types, kernel
// declarations) in CUDA C++. A kernel program is this prelude, then the
// dialect's shared helpers (backend/dialect/dialect.h), then an op family's
// source. No CUDA headers: NVRTC runs without a toolkit.
#define MC_KERNEL extern "C" __global__
#define MC_DEVICE static __device__ __forceinline__
#define MC_METHOD __device__ __forceinline__
#define MC_BARRIER() __syncthreads()
#define MC_BARRIER_DEVICE() __syncthreads()  // orders global memory in the block too
#define MC_WARP_BARRIER() __syncwarp()
// MC_SHARED declares group-shared memory, in a kernel's entry only (MSL
// has no threadgroup variables in other functions): helpers take it as an
// MC_GROUP pointer or reference.
#define MC_SHARED __shared__
// Address spaces, which MSL requires on every pointer and reference:
// MC_GLOBAL device memory, MC_GROUP shared memory, MC_THREAD the thread's
// own, MC_CONSTANT a kernel's argument table. CUDA needs none: they are
// empty here.
#define MC_GLOBAL
#define MC_GROUP
#define MC_THREAD
#define MC_CONSTANT
#define MC_ALIGN(bytes) __align__(bytes)
// MC_SHARED_DYNAMIC(T, name): the block's dynamic shared memory as T name[]
#define MC_SHARED_DYNAMIC(T, name) extern __shared__ T name[]
// MC_BOUNDS(threads, blocks): a kernel's largest block, and the blocks a
// multiprocessor should hold at once (its register budget)
#define MC_BOUNDS(threads, blocks) __launch_bounds__(threads, blocks)
// MC_INLINE_BYTES: the most a kernel's arguments may take by value (CUDA
// 12.1+ on sm_70 and later: 32 KB of parameters, less the driver's own)
#define MC_INLINE_BYTES 32764

typedef unsigned short mc_u16;
typedef long long mc_i64;
typedef unsigned long long mc_u64;  // an address as an integer

// Thread and group indices. An entry declares them (MC_IDS_DECLARE) and
// passes them down as `MC_IDS` (MSL has no global thread index); kernel
// bodies read them as MC_TID and the rest. On CUDA the struct is empty and
// each read is the special register's: held in a struct, the values took
// registers (gelu's bfloat16 backward: 40 instead of 32).
struct mc_ids {
    MC_METHOD int tid() const { return (int)threadIdx.x; }
    MC_METHOD int nthreads() const { return (int)blockDim.x; }
    MC_METHOD mc_i64 block() const { return (mc_i64)blockIdx.x; }
    MC_METHOD mc_i64 nblocks() const { return (mc_i64)gridDim.x; }
};
#define MC_IDS MC_THREAD const mc_ids& id
#define MC_IDS_DECLARE const mc_ids id = {}
#define MC_TID (id.tid())
#define MC_NTHREADS (id.nthreads())
#define MC_BLOCK (id.block())
#define MC_NBLOCKS (id.nblocks())

// lane l's v exchanged with lane l ^ o's, in a 32-lane SIMD group
template <class V> MC_DEVICE V mc_shfl_xor(V v, int o) { return __shfl_xor_sync(0xffffffffu, v, o); }
// mc_shfl: v of lane `from` of the warp, every lane taking part
template <class V> MC_DEVICE V mc_shfl(V v, int from) { return __shfl_sync(0xffffffffu, v, from); }
MC_DEVICE float mc_inf() { return __int_as_float(0x7f800000); }
// 2^e for e in [-126, 127], exactly
MC_DEVICE float mc_pow2(int e) { return __int_as_float((127 + e) << 23); }
// e with |x| = f 2^e, f in [0.5, 1), for normal x (frexp's); -126 for
// denormals and zero, 129 for infinities and NaN
MC_DEVICE int mc_exponent(float x) { return ((__float_as_int(x) >> 23) & 255) - 126; }

// Element types: T is the storage type; unpack and pack convert a value to
// and from float32 (16-bit packing rounds to nearest even; NaN stays NaN),
// load and store do so through device memory.
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
    MC_DEVICE float unpack(T v) { return __uint_as_float(((unsigned)v) << 16); }
    MC_DEVICE T pack(float v) {
#if __CUDA_ARCH__ >= 800
        mc_u16 h;  // the hardware rounds to nearest even and keeps NaN a NaN
        asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(v));
        return h;
#else
        unsigned u = __float_as_uint(v);
        if ((u & 0x7fffffffu) > 0x7f800000u) return (mc_u16)((u >> 16) | 0x40u);
        return (mc_u16)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
#endif
    }
    MC_DEVICE float load(MC_GLOBAL const T* p) { return unpack(*p); }
    MC_DEVICE void store(MC_GLOBAL T* p, float v) { *p = pack(v); }
    MC_DEVICE float round(float v) { return unpack(pack(v)); }
};
struct F16 {
    typedef mc_u16 T;
    MC_DEVICE float unpack(T v) {
        float f;
        asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v));
        return f;
    }
    MC_DEVICE T pack(float v) {
        mc_u16 h;
        asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
        return h;
    }
    MC_DEVICE float load(MC_GLOBAL const T* p) { return unpack(*p); }
    MC_DEVICE void store(MC_GLOBAL T* p, float v) { *p = pack(v); }
    MC_DEVICE float round(float v) { return unpack(pack(v)); }
};

// Blocks that wait for each other (QR's panel groups). mc_load_coherent
// reads from L2, past this multiprocessor's L1, which may hold a stale copy
// of what another block wrote. mc_blocks_sync is arrival `target` at
// *counter: every block counted must be resident at once, so such kernels
// are launched cooperatively (the launch fails rather than hangs).
MC_DEVICE float mc_load_coherent(MC_GLOBAL const float* p) {
    float v;
    asm volatile("ld.global.cg.f32 %0, [%1];" : "=f"(v) : "l"(p));
    return v;
}
MC_DEVICE void mc_blocks_sync(MC_IDS, MC_GLOBAL unsigned* counter, unsigned target) {
    __threadfence();
    MC_BARRIER();
    if (MC_TID == 0) {
        atomicAdd(counter, 1u);
        while (*(MC_GLOBAL volatile unsigned*)counter < target) {
        }
        __threadfence();
    }
    MC_BARRIER();
}

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

// MC_ENTRY(NAME, PARAMS) { body }: a kernel of one type, whose body starts
// with MC_IDS_DECLARE. One not selected becomes a template never
// instantiated: parsed, never compiled.
#define MC_ENTRY(NAME, PARAMS) MC_CAT(MC_ENTRY_, MC_WANTED(NAME)) NAME PARAMS
#define MC_ENTRY_1 MC_KERNEL void
#define MC_ENTRY_0 template <int mc_unselected> static __device__ void
// MC_ENTRY_GROUP(NAME, S, PARAMS, ARGS): a kernel of one type, NAME, that
// calls NAME_impl(id, group, args...), group an S in shared memory declared
// in the entry.
#define MC_WITH_SHARED(...) (id, mc_shared, __VA_ARGS__)
#define MC_ENTRY_GROUP(NAME, S, PARAMS, ARGS) \
    MC_IF(NAME)                               \
    (MC_KERNEL void NAME PARAMS {             \
        MC_IDS_DECLARE;                       \
        MC_SHARED S mc_shared;                \
        NAME##_impl MC_WITH_SHARED ARGS;      \
    })

// One kernel per dtype: NAME_f32, NAME_f16, NAME_bf16, each calling
// NAME<D>(id, args...). BOUNDS: nothing, or MC_BOUNDS(threads, blocks) where
// a kernel must keep to a register budget. MC_INSTANTIATE_GROUP also gives
// NAME<D> the block's `floats` floats of shared memory, declared in the
// entry: NAME<D>(id, group, args...).
#define MC_WITH_IDS(...) (id, __VA_ARGS__)
#define MC_WITH_GROUP(...) (id, mc_group, __VA_ARGS__)
#define MC_DTYPE_KERNEL(NAME, DT, D, BOUNDS, PARAMS, DECL, CALL) \
    MC_IF(NAME##_##DT)                                           \
    (MC_KERNEL void BOUNDS NAME##_##DT PARAMS {                  \
        MC_IDS_DECLARE;                                          \
        DECL NAME<D> CALL;                                       \
    })
#define MC_DTYPE_KERNELS(NAME, BOUNDS, PARAMS, DECL, CALL)      \
    MC_DTYPE_KERNEL(NAME, f32, F32, BOUNDS, PARAMS, DECL, CALL) \
    MC_DTYPE_KERNEL(NAME, f16, F16, BOUNDS, PARAMS, DECL, CALL) \
    MC_DTYPE_KERNEL(NAME, bf16, BF16, BOUNDS, PARAMS, DECL, CALL)
#define MC_INSTANTIATE_BOUNDS(NAME, BOUNDS, PARAMS, ARGS) MC_DTYPE_KERNELS(NAME, BOUNDS, PARAMS, , MC_WITH_IDS ARGS)
#define MC_INSTANTIATE(NAME, PARAMS, ARGS) MC_INSTANTIATE_BOUNDS(NAME, , PARAMS, ARGS)
#define MC_INSTANTIATE_GROUP(NAME, FLOATS, BOUNDS, PARAMS, ARGS) \
    MC_DTYPE_KERNELS(NAME, BOUNDS, PARAMS, MC_SHARED float mc_group[FLOATS];, MC_WITH_GROUP ARGS)
// MC_INSTANTIATE_DYNAMIC: NAME<D>(id, dynamic, args...), dynamic the block's
// dynamic shared memory as T[] (its size set at launch)
#define MC_WITH_DYNAMIC(...) (id, mc_dynamic, __VA_ARGS__)
#define MC_INSTANTIATE_DYNAMIC(NAME, T, BOUNDS, PARAMS, ARGS) \
    MC_DTYPE_KERNELS(NAME, BOUNDS, PARAMS, MC_SHARED_DYNAMIC(T, mc_dynamic);, MC_WITH_DYNAMIC ARGS)
