// The exported functions of the header. Each one refuses in a child forked
// after the library was loaded, before entering Go: the Go runtime does not
// survive fork (the child has only the forking thread; a garbage collection,
// a grown buffer or a thread that was inside Go at the fork leaves it
// waiting forever). Elsewhere it calls the Go implementation, mcgo_<name>
// (internal entry points, not part of the ABI).
#include <pthread.h>
#include <stdio.h>
#include "metalcore.h"

void mc_set_error(const char* msg, size_t n);

static volatile int mc_forked;

static void mc_in_child(void) { mc_forked = 1; }

__attribute__((constructor)) static void mc_gate_init(void) { pthread_atfork(NULL, NULL, mc_in_child); }

static mc_status mc_refuse_forked(const char* fn) {
    char msg[320];
    int n = snprintf(msg, sizeof msg,
                     "%s: metalcore cannot run in a process forked after it was loaded (the Go runtime inside "
                     "it does not survive fork); use the spawn or forkserver start method, or load metalcore "
                     "in the child",
                     fn);
    mc_set_error(msg, n < (int)sizeof msg ? (size_t)n : sizeof msg - 1);
    return MC_ERR_BACKEND;
}

#define MC_STR(x) #x
#define MC_XSTR(x) MC_STR(x)

int32_t mc_version(void) { return MC_VERSION_MAJOR * 10000 + MC_VERSION_MINOR * 100 + MC_VERSION_PATCH; }

const char* mc_version_string(void) {
    return MC_XSTR(MC_VERSION_MAJOR) "." MC_XSTR(MC_VERSION_MINOR) "." MC_XSTR(MC_VERSION_PATCH);
}

int32_t mcgo_backend_available(int32_t device_type);
int32_t mc_backend_available(int32_t device_type) { return mc_forked ? 0 : mcgo_backend_available(device_type); }

int32_t mcgo_cpu_threads(void);
int32_t mc_cpu_threads(void) { return mc_forked ? 0 : mcgo_cpu_threads(); }

const char* mcgo_cpu_isa(void);
const char* mc_cpu_isa(void) { return mc_forked ? "" : mcgo_cpu_isa(); }

#define MC_GATED(name, params, args)                                               \
    mc_status mcgo_##name params;                                                  \
    mc_status mc_##name params { return mc_forked ? mc_refuse_forked("mc_" #name) : mcgo_##name args; }

typedef const mc_tensor cten;

MC_GATED(rmsnorm_fwd, (cten* x, cten* weight, float eps, mc_tensor* y, mc_tensor* rstd, void* encoder),
         (x, weight, eps, y, rstd, encoder))
MC_GATED(rmsnorm_bwd_workspace_size, (cten* x, int64_t* bytes), (x, bytes))
MC_GATED(rmsnorm_bwd,
         (cten* dy, cten* x, cten* weight, cten* rstd, mc_tensor* dx, mc_tensor* dweight, mc_tensor* workspace,
          void* encoder),
         (dy, x, weight, rstd, dx, dweight, workspace, encoder))
MC_GATED(fused_add_rmsnorm_fwd,
         (cten* x, cten* residual, cten* weight, float eps, mc_tensor* y, mc_tensor* residual_out, mc_tensor* rstd,
          void* encoder),
         (x, residual, weight, eps, y, residual_out, rstd, encoder))
MC_GATED(layernorm_fwd,
         (cten* x, cten* weight, cten* bias, float eps, mc_tensor* y, mc_tensor* mean, mc_tensor* rstd,
          void* encoder),
         (x, weight, bias, eps, y, mean, rstd, encoder))
MC_GATED(layernorm_bwd_workspace_size, (cten* x, int64_t* bytes), (x, bytes))
MC_GATED(layernorm_bwd,
         (cten* dy, cten* x, cten* weight, cten* mean, cten* rstd, mc_tensor* dx, mc_tensor* dweight,
          mc_tensor* dbias, mc_tensor* workspace, void* encoder),
         (dy, x, weight, mean, rstd, dx, dweight, dbias, workspace, encoder))
MC_GATED(softmax_fwd, (cten* x, mc_tensor* y, void* encoder), (x, y, encoder))
MC_GATED(softmax_bwd, (cten* dy, cten* y, mc_tensor* dx, void* encoder), (dy, y, dx, encoder))
MC_GATED(gelu_fwd, (cten* x, int32_t approximate, mc_tensor* y, void* encoder), (x, approximate, y, encoder))
MC_GATED(gelu_bwd, (cten* dy, cten* x, int32_t approximate, mc_tensor* dx, void* encoder),
         (dy, x, approximate, dx, encoder))
MC_GATED(silu_fwd, (cten* x, mc_tensor* y, void* encoder), (x, y, encoder))
MC_GATED(silu_bwd, (cten* dy, cten* x, mc_tensor* dx, void* encoder), (dy, x, dx, encoder))
MC_GATED(rope, (cten* x, cten* cos, cten* sin, int32_t backward, mc_tensor* y, void* encoder),
         (x, cos, sin, backward, y, encoder))
MC_GATED(glu_fwd, (cten* gate, cten* up, int32_t kind, mc_tensor* y, void* encoder), (gate, up, kind, y, encoder))
MC_GATED(glu_bwd, (cten* dy, cten* gate, cten* up, int32_t kind, mc_tensor* dgate, mc_tensor* dup, void* encoder),
         (dy, gate, up, kind, dgate, dup, encoder))
MC_GATED(cross_entropy,
         (cten* logits, cten* target, int64_t ignore_index, float label_smoothing, cten* scale, mc_tensor* loss,
          mc_tensor* dlogits, void* encoder),
         (logits, target, ignore_index, label_smoothing, scale, loss, dlogits, encoder))
MC_GATED(cross_entropy_fwd,
         (cten* logits, cten* target, int64_t ignore_index, float label_smoothing, mc_tensor* loss, mc_tensor* lse,
          void* encoder),
         (logits, target, ignore_index, label_smoothing, loss, lse, encoder))
MC_GATED(cross_entropy_bwd,
         (cten* logits, cten* target, cten* lse, int64_t ignore_index, float label_smoothing, cten* scale,
          mc_tensor* dlogits, void* encoder),
         (logits, target, lse, ignore_index, label_smoothing, scale, dlogits, encoder))
MC_GATED(loss_grad_scale, (mc_tensor* grad, cten* scale, void* encoder), (grad, scale, encoder))
MC_GATED(adamw_step,
         (const mc_adamw_config* cfg, int64_t n_tensors, mc_tensor* const* params, cten* const* grads,
          mc_tensor* const* exp_avgs, mc_tensor* const* exp_avg_sqs, mc_tensor* const* max_exp_avg_sqs,
          void* encoder),
         (cfg, n_tensors, params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, encoder))
MC_GATED(adamw_step_scaled,
         (const mc_adamw_config* cfg, int64_t n_tensors, mc_tensor* const* params, cten* const* grads,
          mc_tensor* const* exp_avgs, mc_tensor* const* exp_avg_sqs, mc_tensor* const* max_exp_avg_sqs,
          cten* grad_scale, cten* found_inf, void* encoder),
         (cfg, n_tensors, params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, grad_scale, found_inf, encoder))
MC_GATED(adamw_step_capturable,
         (const mc_adamw_config* cfg, int64_t n_tensors, mc_tensor* const* params, cten* const* grads,
          mc_tensor* const* exp_avgs, mc_tensor* const* exp_avg_sqs, mc_tensor* const* max_exp_avg_sqs,
          cten* grad_scale, cten* found_inf, cten* steps, cten* lr, void* encoder),
         (cfg, n_tensors, params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, grad_scale, found_inf, steps, lr,
          encoder))
MC_GATED(cholesky, (cten* a, int32_t upper, mc_tensor* l, mc_tensor* info, void* encoder),
         (a, upper, l, info, encoder))
MC_GATED(eigh, (cten* a, int32_t upper, mc_tensor* w, mc_tensor* v, mc_tensor* info, void* encoder),
         (a, upper, w, v, info, encoder))
MC_GATED(svd, (cten* a, mc_tensor* u, mc_tensor* s, mc_tensor* vh, mc_tensor* info, void* encoder),
         (a, u, s, vh, info, encoder))
MC_GATED(solve, (cten* a, cten* b, mc_tensor* x, mc_tensor* info, void* encoder), (a, b, x, info, encoder))
MC_GATED(qr_workspace_size, (cten* a, int32_t mode, int64_t* bytes), (a, mode, bytes))
MC_GATED(qr, (cten* a, int32_t mode, mc_tensor* q, mc_tensor* r, mc_tensor* workspace, void* encoder),
         (a, mode, q, r, workspace, encoder))
MC_GATED(cuda_prepare, (int32_t device_id), (device_id))
MC_GATED(metal_prepare, (void* encoder_or_device), (encoder_or_device))
MC_GATED(set_cpu_threads, (int32_t n), (n))
