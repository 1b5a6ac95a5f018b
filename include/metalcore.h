/*
 * metalcore — fused tensor kernels behind a plain C ABI.
 *
 * The host passes tensors it owns (laid out exactly like DLPack's DLTensor) and
 * the queue it is recording on; metalcore validates the call, encodes the kernel
 * there and returns. It never commits, waits, synchronizes or allocates device
 * memory behind the host's back.
 *
 *   - CPU tensors (device type 1): the encoder argument is NULL and the op runs
 *     now, on the calling thread plus the library's worker pool.
 *   - CUDA tensors (device type 2): the encoder argument is a CUstream /
 *     cudaStream_t (NULL: the legacy default stream). The kernel is launched
 *     on it and the call returns at once: no synchronization, no device
 *     allocation, no copy; capturable into a CUDA graph after
 *     mc_cuda_prepare. The driver and NVRTC are found at run time
 *     (mc_backend_available(2) says whether they were); kernels are compiled
 *     for each device on first use. Row ops need outer dimensions that
 *     collapse into one strided row index; activations need contiguous
 *     tensors.
 *   - Metal tensors (device type 8): data is the id<MTLBuffer> and
 *     byte_offset the view's offset into it (DLPack's convention); the encoder
 *     argument is the host's open id<MTLComputeCommandEncoder>. metalcore sets
 *     pipelines, buffers and bytes and dispatches on it, with a buffer-scope
 *     memory barrier between its own dependent dispatches; it never ends the
 *     encoder, commits or waits. macOS only (mc_backend_available(8) is 0
 *     elsewhere); every buffer's length and device are checked before
 *     anything is encoded. AdamW needs Metal 3 (buffers' GPU addresses).
 *
 * Every op returns an mc_status. On any status other than MC_OK no output byte
 * was written and nothing was enqueued; mc_last_error() then names the
 * function, the argument and the problem (thread-local).
 *
 * A process that forks after loading metalcore cannot use it in the child
 * (the Go runtime inside does not survive fork): there every op returns
 * MC_ERR_BACKEND saying so, and mc_backend_available returns 0. Fork before
 * loading it, or start children with spawn/forkserver.
 *
 * Dtypes: float32, float16, bfloat16; arithmetic always accumulates in float32
 * and 16-bit results are rounded to nearest even. The reduced (last) dimension
 * must be contiguous; outer dimensions may carry any strides. An output may
 * alias its matching input exactly (same data, shape and strides: in place);
 * any other overlap between tensors of one call is rejected. Empty tensors are
 * valid and do nothing.
 *
 * C99 and C++ clean. Link with -ldl and dlopen("libmetalcore.so"), or link it.
 */
#ifndef METALCORE_H
#define METALCORE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The version of this header and of the library built from it (mc_version()
 * returns the same numbers). Within one major version the ABI only grows:
 * functions, enum values and struct types are never removed or changed, so a
 * host built against an older minor version runs with a newer library. */
#define MC_VERSION_MAJOR 0
#define MC_VERSION_MINOR 6
#define MC_VERSION_PATCH 0

typedef enum {
    MC_OK = 0,
    MC_ERR_INVALID_ARGUMENT = 1,   /* NULL, wrong shape, overlap, bad value     */
    MC_ERR_UNSUPPORTED_DTYPE = 2,  /* dtype not float32/float16/bfloat16, mixed */
    MC_ERR_UNSUPPORTED_DEVICE = 3, /* device type unknown or backend missing    */
    MC_ERR_UNSUPPORTED_LAYOUT = 4, /* reduced dimension not contiguous, ...     */
    MC_ERR_BACKEND = 5,            /* the device runtime refused the work       */
    MC_ERR_INTERNAL = 6,           /* a bug in metalcore; please report it      */
    MC_ERR_OUT_OF_MEMORY = 7       /* working memory could not be had (0.5)     */
} mc_status;

enum { MC_DEVICE_CPU = 1, MC_DEVICE_CUDA = 2, MC_DEVICE_METAL = 8 }; /* DLPack codes */
enum { MC_DTYPE_INT = 0, MC_DTYPE_FLOAT = 2, MC_DTYPE_BFLOAT = 4 };  /* DLPack codes */

typedef struct { int32_t device_type; int32_t device_id; } mc_device;    /* = DLDevice   */
typedef struct { uint8_t code; uint8_t bits; uint16_t lanes; } mc_dtype; /* = DLDataType */

/* = DLTensor. strides (in elements) may be NULL: row-major contiguous. */
typedef struct {
    void* data;
    mc_device device;
    int32_t ndim;
    mc_dtype dtype;
    int64_t* shape;
    int64_t* strides;
    uint64_t byte_offset;
} mc_tensor;

/* AdamW hyper-parameters (see mc_adamw_step). */
typedef struct {
    double lr, beta1, beta2, eps, weight_decay;
    int64_t step;
    int32_t amsgrad, maximize;
} mc_adamw_config;

#ifndef METALCORE_TYPES_ONLY

/* ---- queries; these never fail ---------------------------------------- */

int32_t     mc_version(void);        /* major*10000 + minor*100 + patch */
const char* mc_version_string(void);
int32_t     mc_backend_available(int32_t device_type); /* 1 or 0 */
const char* mc_last_error(void);     /* this thread's last failure, "" if none */

/* ---- the CPU backend -----------------------------------------------------
 * mc_cpu_threads: how many threads one CPU call may use (MC_NUM_THREADS at
 * load, else every core; at most MC_MAX_CPU_THREADS, a larger MC_NUM_THREADS
 * is clamped with a warning on stderr); mc_set_cpu_threads changes it for
 * later calls (n >= 1, else MC_ERR_INVALID_ARGUMENT; clamped to
 * MC_MAX_CPU_THREADS). mc_cpu_isa: the vector instruction
 * set the CPU kernels use, "avx512", "avx2" or "portable" (MC_CPU_ISA forces
 * one). In a forked child (see above) mc_cpu_threads is 0 and mc_cpu_isa "". */
#define MC_MAX_CPU_THREADS 4096
int32_t     mc_cpu_threads(void);
mc_status   mc_set_cpu_threads(int32_t n);
const char* mc_cpu_isa(void);

/* ---- RMSNorm ------------------------------------------------------------
 * x [..., H]; weight [H] or NULL; y like x (may be x);
 * rstd float32 with one value per row ([rows] or x's shape without H), or
 * NULL: saved for the backward pass. y = x / sqrt(mean(x^2) + eps) * weight. */
mc_status mc_rmsnorm_fwd(const mc_tensor* x, const mc_tensor* weight, float eps,
                         mc_tensor* y, mc_tensor* rstd, void* encoder);

/* Bytes of workspace mc_rmsnorm_bwd needs to reduce dweight over rows (0 when
 * x is empty). */
mc_status mc_rmsnorm_bwd_workspace_size(const mc_tensor* x, int64_t* bytes);

/* dy, x [..., H]; weight [H] or NULL; rstd from the forward pass (required);
 * dx like x (may be dy); dweight like weight, or NULL to skip it (must be NULL
 * when weight is NULL); workspace: 1-D uint8 or float32 of at least the
 * queried size, NULL when dweight is NULL. dweight is deterministic. */
mc_status mc_rmsnorm_bwd(const mc_tensor* dy, const mc_tensor* x, const mc_tensor* weight,
                         const mc_tensor* rstd, mc_tensor* dx, mc_tensor* dweight,
                         mc_tensor* workspace, void* encoder);

/* residual_out = x + residual (rounded to the dtype; may be residual);
 * y = rmsnorm(residual_out) * weight (may be x); rstd as in mc_rmsnorm_fwd. */
mc_status mc_fused_add_rmsnorm_fwd(const mc_tensor* x, const mc_tensor* residual,
                                   const mc_tensor* weight, float eps, mc_tensor* y,
                                   mc_tensor* residual_out, mc_tensor* rstd, void* encoder);

/* ---- LayerNorm ----------------------------------------------------------
 * x [..., H]; weight, bias [H] or NULL; y like x (may be x); mean and rstd
 * float32 per row, or NULL. y = (x - mean) * rstd * weight + bias. */
mc_status mc_layernorm_fwd(const mc_tensor* x, const mc_tensor* weight, const mc_tensor* bias,
                           float eps, mc_tensor* y, mc_tensor* mean, mc_tensor* rstd,
                           void* encoder);
mc_status mc_layernorm_bwd_workspace_size(const mc_tensor* x, int64_t* bytes);
/* mean and rstd from the forward pass are required; dweight/dbias may each be
 * NULL (dweight must be NULL when weight is); workspace needed when either is
 * requested. dx may be dy. */
mc_status mc_layernorm_bwd(const mc_tensor* dy, const mc_tensor* x, const mc_tensor* weight,
                           const mc_tensor* mean, const mc_tensor* rstd, mc_tensor* dx,
                           mc_tensor* dweight, mc_tensor* dbias, mc_tensor* workspace,
                           void* encoder);

/* ---- softmax over the last dimension ------------------------------------
 * y like x, or float32 when x is float16 or bfloat16 (the upcast of
 * torch.softmax(x, dim, dtype=torch.float32): the same float32 arithmetic,
 * stored without rounding to 16 bits). */
mc_status mc_softmax_fwd(const mc_tensor* x, mc_tensor* y, void* encoder);
/* dx = y * (dy - sum(dy * y)); dx may be dy. */
mc_status mc_softmax_bwd(const mc_tensor* dy, const mc_tensor* y, mc_tensor* dx, void* encoder);

/* ---- activations (elementwise, any shape) -------------------------------- */
enum { MC_GELU_ERF = 0, MC_GELU_TANH = 1 };
mc_status mc_gelu_fwd(const mc_tensor* x, int32_t approximate, mc_tensor* y, void* encoder);
mc_status mc_gelu_bwd(const mc_tensor* dy, const mc_tensor* x, int32_t approximate,
                      mc_tensor* dx, void* encoder);
mc_status mc_silu_fwd(const mc_tensor* x, mc_tensor* y, void* encoder);
mc_status mc_silu_bwd(const mc_tensor* dy, const mc_tensor* x, mc_tensor* dx, void* encoder);

/* Rotary position embedding (since 0.6), Hugging Face's rotate_half form over the last
 * dimension: y = x * cos + rotate_half(x) * sin, rotate_half(x) = [-x2, x1] of x's halves; with
 * backward nonzero, the gradient of that for a gradient x: [x1 c1 + x2 s2, x2 c2 - x1 s1].
 * x [B, H, T, D], D even, any strides with a unit last one (a transposed [B, T, H, D] as models
 * make q and k); cos, sin [B or 1, T, D] of x's dtype (broadcast over the heads); y: x's shape
 * and dtype, any strides with a unit last one whose elements do not overlap (x's own layout,
 * say: a host keeps a transposed q's layout for the result and its gradient), sharing no
 * memory with x. q and k are two calls. */
mc_status mc_rope(const mc_tensor* x, const mc_tensor* cos, const mc_tensor* sin, int32_t backward, mc_tensor* y,
                  void* encoder);

/* Gated activations (since 0.6), the MLP of Llama-style models: y = act(gate) * up elementwise,
 * act SiLU (SwiGLU) or GELU (GeGLU, erf or tanh form); gate, up and every output of one shape
 * and dtype, contiguous. y may be gate or up; dgate may be gate, dup may be up. */
enum { MC_GLU_SWIGLU = 0, MC_GLU_GEGLU = 1, MC_GLU_GEGLU_TANH = 2 };
mc_status mc_glu_fwd(const mc_tensor* gate, const mc_tensor* up, int32_t kind, mc_tensor* y, void* encoder);
/* dgate = dy * up * act'(gate), dup = dy * act(gate). */
mc_status mc_glu_bwd(const mc_tensor* dy, const mc_tensor* gate, const mc_tensor* up, int32_t kind,
                     mc_tensor* dgate, mc_tensor* dup, void* encoder);

/* ---- cross-entropy over the last dimension (since 0.6) -------------------
 * For each row r of logits (rows = every index but the last, V = the last
 * dimension) with class target t = target[r] (int64):
 *   loss[r]       = (1-s)(lse_r - x[r,t]) + s(lse_r - mean_j x[r,j])
 *   dlogits[r, j] = scale * (softmax(x_r)_j - (1-s)[j = t] - s/V)
 * s = label_smoothing in [0, 1], lse_r the row's log-sum-exp, computed in
 * float32 from one read of the row. A row whose target is ignore_index
 * loses 0 and gets a zero gradient. target and loss (float32) hold one value
 * per row (shaped as logits without its last dimension, or 1-D), contiguous;
 * dlogits (or NULL: the loss alone) is shaped and typed as logits and may be
 * logits itself; scale (or NULL: 1) is float32 on the call's device, one
 * value for every row or one per row (contiguous), read there, so that a
 * mean's 1 / count or the loss's own gradient never waits for the device
 * (a host may take the loss first and the gradient in its backward). A host
 * builds F.cross_entropy's reductions from the rows, and a chunked linear
 * cross-entropy from calls on chunks of logits of its own GEMMs. A target
 * outside [0, V) other than ignore_index: MC_ERR_INVALID_ARGUMENT on the
 * CPU, before anything is written; on a GPU, which cannot read it without
 * waiting, NaN loss and gradient for that row. */
mc_status mc_cross_entropy(const mc_tensor* logits, const mc_tensor* target, int64_t ignore_index,
                           float label_smoothing, const mc_tensor* scale, mc_tensor* loss, mc_tensor* dlogits,
                           void* encoder);
/* The same split for a host that takes the loss first and the gradient in
 * its backward, reading the logits once each way: mc_cross_entropy_fwd
 * writes loss and each row's log-sum-exp lse (float32, shaped as loss; 0 for
 * an ignored row, NaN where the loss is); mc_cross_entropy_bwd takes that
 * lse for the same logits and writes dlogits (required, may be logits
 * itself) as mc_cross_entropy would, without the pass that finds it. */
mc_status mc_cross_entropy_fwd(const mc_tensor* logits, const mc_tensor* target, int64_t ignore_index,
                               float label_smoothing, mc_tensor* loss, mc_tensor* lse, void* encoder);
mc_status mc_cross_entropy_bwd(const mc_tensor* logits, const mc_tensor* target, const mc_tensor* lse,
                               int64_t ignore_index, float label_smoothing, const mc_tensor* scale,
                               mc_tensor* dlogits, void* encoder);
/* grad (contiguous, any float dtype) *= scale, one float32 on grad's device,
 * read there; nothing is written where it is 1. For a host that computed a
 * scalar loss's gradient in its forward (mc_cross_entropy with dlogits) and
 * scales it by the loss's own gradient in its backward: where that is 1, as
 * for a plain loss.backward(), the backward costs a launch and never waits
 * for the device. */
mc_status mc_loss_grad_scale(mc_tensor* grad, const mc_tensor* scale, void* encoder);

/* ---- AdamW ------------------------------------------------------------------
 * One step of torch.optim.AdamW on n_tensors parameters at once: decoupled
 * weight decay p *= 1 - lr*weight_decay, bias corrections from step (the step
 * being taken: 1 on the first call), eps added after the square root of the
 * corrected second moment, amsgrad (keeps max_exp_avg_sqs), maximize.
 * params/grads: float32, float16 or bfloat16, one dtype per pair; exp_avgs,
 * exp_avg_sqs, max_exp_avg_sqs: float32 only, shaped like the param. All
 * tensors contiguous, on one device, no two sharing memory. Every tensor and
 * hyper-parameter is checked before any is updated (all or nothing); a
 * failure names the list and the index. n_tensors is at most 2^20. On CUDA
 * the tensor list travels in the kernel parameters (one launch per 512
 * tensors): no device allocation. */
mc_status mc_adamw_step(const mc_adamw_config* cfg, int64_t n_tensors, mc_tensor* const* params,
                        const mc_tensor* const* grads, mc_tensor* const* exp_avgs, mc_tensor* const* exp_avg_sqs,
                        mc_tensor* const* max_exp_avg_sqs /* NULL unless amsgrad */, void* encoder);
/* mc_adamw_step for mixed-precision training, as torch.amp.GradScaler drives
 * PyTorch's fused AdamW: grad_scale (or NULL) is a float32 tensor of one
 * element by which the gradients are divided; found_inf (or NULL) a float32
 * tensor of one element, and where it is nonzero the step writes nothing.
 * Both on the call's device: on CUDA they are read by the kernel, so the host
 * never waits for them. Without a scaler (mc_adamw_step), an inf or NaN
 * gradient makes its parameter NaN, as in PyTorch. */
mc_status mc_adamw_step_scaled(const mc_adamw_config* cfg, int64_t n_tensors, mc_tensor* const* params,
                               const mc_tensor* const* grads, mc_tensor* const* exp_avgs,
                               mc_tensor* const* exp_avg_sqs, mc_tensor* const* max_exp_avg_sqs,
                               const mc_tensor* grad_scale, const mc_tensor* found_inf, void* encoder);
/* mc_adamw_step_scaled for steps captured in a CUDA graph, as
 * torch.optim.AdamW(capturable=True) takes them: the step numbers and the
 * learning rate are read on the device, by the kernel, so a replay uses the
 * values they hold then. steps: a float32 tensor of n_tensors elements on the
 * call's device, steps[i] the number of the step tensor i is taking (the
 * caller advances it before the call); lr: a float32 tensor of one element on
 * the call's device, or NULL for cfg->lr. cfg->step is not used. The scalars
 * that depend on them (1 - lr * weight_decay, the bias corrections) are formed
 * in float32 on the device, as PyTorch's capturable step forms them. */
mc_status mc_adamw_step_capturable(const mc_adamw_config* cfg, int64_t n_tensors, mc_tensor* const* params,
                                   const mc_tensor* const* grads, mc_tensor* const* exp_avgs,
                                   mc_tensor* const* exp_avg_sqs, mc_tensor* const* max_exp_avg_sqs,
                                   const mc_tensor* grad_scale, const mc_tensor* found_inf,
                                   const mc_tensor* steps, const mc_tensor* lr, void* encoder);

/* ---- QR ---------------------------------------------------------------------
 * Householder QR of every matrix of a [..., m, n], k = min(m, n), computed in
 * float32 (norms in float64), stored in a's dtype. REDUCED: q [..., m, k],
 * r [..., k, n]; COMPLETE: q [..., m, m], r [..., m, n]; R: q NULL,
 * r [..., k, n]. LAPACK's sign convention (r's diagonal may be negative);
 * r's lower triangle is written as exact zeros. a, q, r contiguous; a is not
 * modified. The CPU needs no workspace (size 0, workspace may be NULL); on
 * CUDA, matrices up to 128 wide (rows, columns and q's columns) need none
 * either, larger ones mc_qr_workspace_size bytes of device memory on a's
 * device. */
enum { MC_QR_REDUCED = 0, MC_QR_COMPLETE = 1, MC_QR_R = 2 };
/* ---- batched Cholesky (since 0.6) -------------------------------------------
 * For every matrix A of a [..., n, n] (symmetric positive-definite): with
 * upper == 0, l = L lower triangular with a positive diagonal, A = L L^T,
 * reading A's lower triangle only; with upper != 0, l = U = L^T, A = U^T U,
 * reading the upper triangle. The other triangle of l is zero. info [...]
 * (int32, one per matrix) is 0 where A factored and k > 0 where its leading
 * minor of order k is not positive-definite or holds a NaN (LAPACK's potrf):
 * then l's entries from column (row, with upper) k - 1 on are unspecified.
 * Nothing waits for the device: a host that must raise on info > 0 reads
 * info itself. a and l: float32, float16 or bfloat16, one dtype, computed in
 * float32; contiguous, l never a itself. The GPU kernels hold a matrix in
 * fast on-chip memory: n up to 128 on CUDA and 64 on Metal, larger ones
 * MC_ERR_UNSUPPORTED_LAYOUT there (no workspace, no allocation). */
mc_status mc_cholesky(const mc_tensor* a, int32_t upper, mc_tensor* l, mc_tensor* info, void* encoder);

/* Batched linear systems: for every A of a [..., n, n] and its right-hand
 * sides b [..., n, k], x (b's shape; may be b itself) = A^-1 b by Gaussian
 * elimination with partial pivoting, in float32 (16-bit inputs converted);
 * a is read only. info [...] (int32, one per matrix): 0, or j > 0 where the
 * j-th pivot is zero (A singular, as LAPACK's getrf reports it), and that
 * system's x is NaN. A NaN in A or b gives NaN in x. a, b, x: one float
 * dtype, contiguous. On a GPU up to 32 x 32 with up to 8 right-hand sides a
 * warp per system, larger ones a block per system in shared memory: beyond
 * what that holds (n (n + k) floats: 200 KB on CUDA, 32 KB on Metal)
 * MC_ERR_UNSUPPORTED_LAYOUT. */
mc_status mc_solve(const mc_tensor* a, const mc_tensor* b, mc_tensor* x, mc_tensor* info, void* encoder);

/* Batched symmetric eigendecomposition: every symmetric A of a [..., n, n]
 * as A = V diag(w) V^T, reading A's lower triangle (upper == 0) or its upper
 * one: w [..., n] the eigenvalues in ascending order, v (NULL for
 * eigenvalues only) [..., n, n] orthonormal eigenvectors in its columns,
 * by cyclic Jacobi rotations in float32 (16-bit inputs converted). info
 * [...] (int32, one per matrix): 0, or 1 where A holds a NaN or an infinity
 * (its w and v are then NaN) or the rotations did not converge. a, w, v: one
 * float dtype, contiguous, not overlapping. The GPU kernels hold a matrix
 * (and above order 32 its eigenvectors) in on-chip memory, n (n + 1) floats
 * each: n up to 153 on CUDA and 60 on Metal (eigenvalues alone: 211 and
 * 83), larger ones MC_ERR_UNSUPPORTED_LAYOUT there. */
mc_status mc_eigh(const mc_tensor* a, int32_t upper, mc_tensor* w, mc_tensor* v, mc_tensor* info, void* encoder);

/* Batched thin singular value decomposition: every A of a [..., m, n] as
 * A = U diag(s) Vh with k = min(m, n): s [..., k] the singular values in
 * descending order, u [..., m, k] and vh [..., k, n] (both, or both NULL
 * for the values only) with orthonormal columns and rows, by one-sided
 * Jacobi rotations in float32 (16-bit inputs converted). A rank-deficient
 * A's u and vh stay orthonormal (a zero singular value's vectors complete
 * the others'). info [...] (int32, one per matrix): 0, or 1 where A holds a
 * NaN or an infinity (its s, u and vh are then NaN) or the rotations did
 * not converge. a, u, s, vh: one float dtype, contiguous, not overlapping.
 * The GPU kernels hold a matrix (max(m, n) x k floats) and, with the
 * vectors, k x k more in on-chip memory: squares up to 159 on CUDA and 63
 * on Metal (values alone: 224 and 88), larger ones
 * MC_ERR_UNSUPPORTED_LAYOUT there. */
mc_status mc_svd(const mc_tensor* a, mc_tensor* u, mc_tensor* s, mc_tensor* vh, mc_tensor* info, void* encoder);

mc_status mc_qr_workspace_size(const mc_tensor* a, int32_t mode, int64_t* bytes);
mc_status mc_qr(const mc_tensor* a, int32_t mode, mc_tensor* q, mc_tensor* r,
                mc_tensor* workspace /* NULL when the size is 0 */, void* encoder);

/* ---- CUDA ------------------------------------------------------------------
 * Compile and load every kernel for device_id now, in the context current
 * on this thread or else the device's primary context. Call it before
 * capturing metalcore calls into a CUDA graph: a call that would need to load
 * a module while its stream is capturing fails instead. */
mc_status mc_cuda_prepare(int32_t device_id);

/* ---- Metal -----------------------------------------------------------------
 * Compile every kernel's pipeline now for the device of encoder_or_device
 * (an id<MTLComputeCommandEncoder> or an id<MTLDevice>); otherwise each is
 * compiled from the library's MSL on its first use. */
mc_status mc_metal_prepare(void* encoder_or_device);

#endif /* METALCORE_TYPES_ONLY */

#ifdef __cplusplus
}
#endif

#endif /* METALCORE_H */
