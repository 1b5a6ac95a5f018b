"""Layer 2: the kernel calls, one function per library op: allocate the
outputs, describe the tensors, call the library on the tensor's queue.
Every path above (autograd Functions, custom ops, the optimizer) calls
these; none of them checks whether the library takes the input (that is
_lib.unsupported, asked by the caller)."""
import ctypes

import torch

from . import _lib
from ._lib import CALLS, check, describe, describe_half, describe_like, encoder, lib

_rmsnorm_fwd, _rmsnorm_bwd = lib.mc_rmsnorm_fwd, lib.mc_rmsnorm_bwd
_layernorm_fwd, _layernorm_bwd = lib.mc_layernorm_fwd, lib.mc_layernorm_bwd
_softmax_fwd, _softmax_bwd = lib.mc_softmax_fwd, lib.mc_softmax_bwd
_gelu_fwd, _gelu_bwd = lib.mc_gelu_fwd, lib.mc_gelu_bwd
_silu_fwd, _silu_bwd = lib.mc_silu_fwd, lib.mc_silu_bwd


def _workspace(query, x, *args):
    """The workspace the size query (an mc_*_workspace_size taking x, args,
    then the size's address) asks for, or None when it asks for none."""
    n = ctypes.c_int64()
    CALLS[query.__name__[3:]] += 1
    check(query(describe(x), *args, ctypes.addressof(n)))
    return torch.empty(n.value, dtype=torch.uint8, device=x.device) if n.value else None


def _row_stats(x):
    return torch.empty(x.shape[:-1], dtype=torch.float32, device=x.device)


def rms_norm(x, weight, eps, want_rstd=True):
    """(y, rstd); rstd None unless want_rstd."""
    y = torch.empty_like(x)
    rstd = _row_stats(x) if want_rstd else None
    CALLS["rmsnorm_fwd"] += 1
    xd = describe(x, 0)
    check(_rmsnorm_fwd(xd, describe(weight, 1), eps, describe_like(y, 2, 0), describe(rstd, 3), encoder(x)))
    return y, rstd


def rms_norm_backward(dy, x, weight, rstd, want_dw):
    """(dx, dweight); dweight None unless want_dw."""
    dx = torch.empty_like(x)
    dw = torch.empty_like(weight) if want_dw else None
    ws = _workspace(lib.mc_rmsnorm_bwd_workspace_size, x) if want_dw else None
    CALLS["rmsnorm_bwd"] += 1
    check(_rmsnorm_bwd(describe(dy.contiguous(), 0), describe(x, 1), describe(weight, 2), describe(rstd, 3),
                       describe(dx, 4), describe(dw, 5), describe(ws, 6), encoder(x)))
    return dx, dw


def layer_norm(x, weight, bias, eps, want_stats=True):
    """(y, stats): stats float32 [2, rows...], each row's mean then its rstd
    (one allocation), or None unless want_stats."""
    y = torch.empty_like(x)
    CALLS["layernorm_fwd"] += 1
    xd = describe(x, 0)
    if want_stats:
        stats = torch.empty((2,) + x.shape[:-1], dtype=torch.float32, device=x.device)
        check(_layernorm_fwd(xd, describe(weight, 1), describe(bias, 2), eps, describe_like(y, 3, 0),
                             describe_half(stats, 4, 0), describe_half(stats, 5, 1), encoder(x)))
        return y, stats
    check(_layernorm_fwd(xd, describe(weight, 1), describe(bias, 2), eps, describe_like(y, 3, 0), None, None,
                         encoder(x)))
    return y, None


def layer_norm_backward(dy, x, weight, stats, want_dw, want_db):
    """(dx, dweight, dbias); each gradient None unless wanted."""
    dx = torch.empty_like(x)
    dw = torch.empty_like(weight) if want_dw else None
    db = torch.empty(x.shape[-1], dtype=x.dtype, device=x.device) if want_db else None
    ws = _workspace(lib.mc_layernorm_bwd_workspace_size, x) if (want_dw or want_db) else None
    CALLS["layernorm_bwd"] += 1
    check(_layernorm_bwd(describe(dy.contiguous(), 0), describe(x, 1), describe(weight, 2), describe_half(stats, 3, 0),
                         describe_half(stats, 4, 1), describe(dx, 5), describe(dw, 6), describe(db, 7),
                         describe(ws, 8), encoder(x)))
    return dx, dw, db


def softmax(x, upcast=False):
    """softmax(x) in x's dtype, or float32 (upcast, for a 16-bit x)."""
    y = torch.empty_like(x, dtype=torch.float32) if upcast else torch.empty_like(x)
    CALLS["softmax_fwd"] += 1
    check(_softmax_fwd(describe(x, 0), describe(y, 1) if upcast else describe_like(y, 1, 0), encoder(x)))
    return y


def softmax_backward(dy, y):
    dx = torch.empty_like(y)
    CALLS["softmax_bwd"] += 1
    check(_softmax_bwd(describe(dy.contiguous(), 0), describe(y, 1), describe(dx, 2), encoder(y)))
    return dx


def gelu(x, tanh_form):
    y = torch.empty_like(x)
    CALLS["gelu_fwd"] += 1
    check(_gelu_fwd(describe(x, 0), tanh_form, describe_like(y, 1, 0), encoder(x)))
    return y


def gelu_backward(dy, x, tanh_form):
    dx = torch.empty_like(x)
    CALLS["gelu_bwd"] += 1
    check(_gelu_bwd(describe(dy.contiguous(), 0), describe(x, 1), tanh_form, describe(dx, 2), encoder(x)))
    return dx


def silu(x):
    y = torch.empty_like(x)
    CALLS["silu_fwd"] += 1
    check(_silu_fwd(describe(x, 0), describe_like(y, 1, 0), encoder(x)))
    return y


def silu_backward(dy, x):
    dx = torch.empty_like(x)
    CALLS["silu_bwd"] += 1
    check(_silu_bwd(describe(dy.contiguous(), 0), describe(x, 1), describe(dx, 2), encoder(x)))
    return dx


def fused_add_rms_norm(x, residual, weight, eps):
    """(rms_norm(x + residual) * weight, x + residual)."""
    y, out = torch.empty_like(x), torch.empty_like(residual)
    CALLS["fused_add_rmsnorm_fwd"] += 1
    check(lib.mc_fused_add_rmsnorm_fwd(describe(x, 0), describe(residual, 1), describe(weight, 2), eps,
                                       describe(y, 3), describe(out, 4), None, encoder(x)))
    return y, out


# ---- QR ---------------------------------------------------------------------------------

QR_MODES = {"reduced": 0, "complete": 1, "r": 2}


def qr_shapes(a, mode):
    """((q rows, q cols), (r rows, r cols)) of each matrix; q is 0 x 0 in
    mode 'r' (torch.linalg.qr's empty Q)."""
    m, n = a.shape[-2:]
    k = min(m, n)
    if mode == "r":
        return (0, 0), (k, n)
    if mode == "complete":
        return (m, m), (m, n)
    return (m, k), (k, n)


def qr(a, mode):
    """(q, r) from the library; q empty in mode 'r'."""
    (qm, qc), (rr, n) = qr_shapes(a, mode)
    batch = a.shape[:-2]
    r = torch.empty(*batch, rr, n, dtype=a.dtype, device=a.device)
    q = torch.empty(*batch, qm, qc, dtype=a.dtype, device=a.device) if mode != "r" else None
    ws = _workspace(lib.mc_qr_workspace_size, a, QR_MODES[mode])
    CALLS["qr"] += 1
    check(lib.mc_qr(describe(a, 0), QR_MODES[mode], describe(q, 1), describe(r, 2), describe(ws, 3), encoder(a)))
    return (q if q is not None else torch.empty(0, dtype=a.dtype, device=a.device)), r


# ---- AdamW ------------------------------------------------------------------------------

class AdamWConfig(ctypes.Structure):
    """mc_adamw_config."""
    _fields_ = [("lr", ctypes.c_double), ("beta1", ctypes.c_double), ("beta2", ctypes.c_double),
                ("eps", ctypes.c_double), ("weight_decay", ctypes.c_double), ("step", ctypes.c_int64),
                ("amsgrad", ctypes.c_int32), ("maximize", ctypes.c_int32)]


class TensorTable:
    """The descriptors of a list of tensors side by side, and the array of
    their addresses (an mc_tensor* const*), kept between calls: a step
    rewrites only what changed (set, or set_data for a tensor of the same
    shape, dtype, device and layout as the one described)."""

    def __init__(self, tensors):
        n = len(tensors)
        self.buffer = ctypes.create_string_buffer(max(n, 1) * _lib.SLOT_BYTES)
        base = ctypes.addressof(self.buffer)
        self.addresses = [base + i * _lib.SLOT_BYTES for i in range(n)]
        self.pointers = (ctypes.c_void_p * max(n, 1))(*self.addresses)
        self.address = ctypes.addressof(self.pointers)
        for i, t in enumerate(tensors):
            self.set(i, t)

    def set(self, i, t):
        _lib.pack_into(self.buffer, i * _lib.SLOT_BYTES, self.addresses[i], t)

    def set_data(self, i, data):
        _lib.DATA.pack_into(self.buffer, i * _lib.SLOT_BYTES, data)


def adamw_step(tables, n, config, grad_scale, found_inf, queue):
    """One library call stepping the n tensors of tables (params, grads,
    exp_avgs, exp_avg_sqs, max_exp_avg_sqs or None: TensorTables) with
    config (an AdamWConfig), dividing the gradients by grad_scale and
    skipping everything where found_inf is set (one-element float32 tensors
    on the tensors' device, or None)."""
    CALLS["adamw_step_scaled"] += 1
    check(lib.mc_adamw_step_scaled(ctypes.addressof(config), n, *_addresses(tables), describe(grad_scale, 0),
                                   describe(found_inf, 1), queue))


def adamw_step_capturable(tables, n, config, grad_scale, found_inf, steps, lr, queue):
    """adamw_step reading each tensor's step number (steps, float32 [n]) and
    optionally the lr (a one-element float32 tensor) on the device."""
    CALLS["adamw_step_capturable"] += 1
    check(lib.mc_adamw_step_capturable(ctypes.addressof(config), n, *_addresses(tables), describe(grad_scale, 0),
                                       describe(found_inf, 1), describe(steps, 2), describe(lr, 3), queue))


def _addresses(tables):
    return [None if t is None else t.address for t in tables]
