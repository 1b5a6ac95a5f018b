/* What NVRTC provides without any header, declared for a syntax check of the
 * kernel sources with clang's CUDA front end (make test-cuda-syntax): the
 * CUDA keywords, vector types and the device functions the kernels call.
 * Declarations only: this checks that the sources parse and their templates
 * instantiate, on a machine with no CUDA toolkit; NVRTC on a GPU machine
 * remains the real compiler. */
#define __device__ __attribute__((device))
#define __global__ __attribute__((global))
#define __host__ __attribute__((host))
#define __shared__ __attribute__((shared))
#define __constant__ __attribute__((constant))
#define __forceinline__ __inline__ __attribute__((always_inline))
#define __launch_bounds__(...) __attribute__((launch_bounds(__VA_ARGS__)))

struct uint3 { unsigned x, y, z; };
struct dim3 { unsigned x, y, z; };
struct uint2 { unsigned x, y; };
struct uint4 { unsigned x, y, z, w; };
struct float4 { float x, y, z, w; };
struct float2 { float x, y; };
__device__ float expf(float);
__device__ float exp2f(float);
__device__ float logf(float);
__device__ float __expf(float);
__device__ float fmaxf(float, float);
__device__ float fminf(float, float);
__device__ float fmaf(float, float, float);
__device__ float rsqrtf(float);
__device__ float sqrtf(float);
__device__ float powf(float, float);
__device__ float fabsf(float);
__device__ float __fdividef(float, float);
__device__ float __int_as_float(int);
__device__ float __uint_as_float(unsigned);
__device__ unsigned __float_as_uint(float);
__device__ int __float_as_int(float);
__device__ float __shfl_xor_sync(unsigned, float, int);
__device__ float __shfl_sync(unsigned, float, int);
__device__ int __shfl_xor_sync(unsigned, int, int);
__device__ void __syncthreads();
__device__ void __syncwarp(unsigned = 0xffffffff);
__device__ void __threadfence();
#include <__clang_cuda_builtin_vars.h>
__device__ float4 make_float4(float, float, float, float);
__device__ int min(int, int);
__device__ long long min(long long, long long);
__device__ int max(int, int);
__device__ long long max(long long, long long);
__device__ float ldexpf(float, int);
__device__ float frexpf(float, int*);
__device__ float copysignf(float, float);
__device__ float atomicAdd(float*, float);
__device__ unsigned atomicAdd(unsigned*, unsigned);
__device__ int atomicAdd(int*, int);
#define __align__(n) __attribute__((aligned(n)))
