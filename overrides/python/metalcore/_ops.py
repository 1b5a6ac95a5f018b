"""metalcore's ops as autograd-aware torch functions.

Each op is a kernel call (the functions ending in _kernel: allocate the
outputs, call the library on the tensor's stream) wrapped for autograd in
one of two ways: on PyTorch 2.4 and later as torch.library custom ops under
torch.ops.metalcore (_custom.py: torch.compile traces them without graph
breaks), on older PyTorch as torch.autograd.Function subclasses (below)."""
import ctypes

import torch
import torch.nn.functional as F

from ._lib import CALLS, available, call, check, describe, encoder, forked, lib

_FLOATS = (torch.float32, torch.float16, torch.bfloat16)

# PyTorch's own functions, taken before any override is installed: the
# differentiable backward and the forked-child fallback compute with them.
_torch_gelu, _torch_silu, _torch_softmax, _torch_layer_norm = F.gelu, F.silu, F.softmax, F.layer_norm


def _torch_rms_norm(x, weight, eps):
    xf = x.float()
    y = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
    return y if weight is None else y * weight


def unsupported(*tensors):
    """Why metalcore does not compute this call, or None when it does: the
    first tensor float32/float16/bfloat16, at least 1-D, contiguous, on a
    device with a backend; every other tensor (None skipped) of its dtype
    and device, and contiguous."""
    first = tensors[0]
    if not isinstance(first, torch.Tensor):
        return "not a tensor"
    if first.dtype not in _FLOATS:
        return f"dtype {str(first.dtype)[6:]}"
    if first.dim() == 0:
        return "0-d"
    if any(t is not None and type(t) not in (torch.Tensor, torch.nn.Parameter) for t in tensors):
        return "tensor subclass"  # DTensor (FSDP2) and the like: their data is not one buffer
    if not available(first.device.type):
        return "forked child" if forked() else f"no {first.device.type} backend"
    for t in tensors:
        if t is None:
            continue
        if not isinstance(t, torch.Tensor) or t.dtype != first.dtype:
            return "mixed dtypes"
        if t.device != first.device:
            return "mixed devices"
        if not t.is_contiguous():
            return "non-contiguous"
    return None


def supported(*tensors):
    """Whether metalcore computes exactly this call (unsupported() is None)."""
    return unsupported(*tensors) is None


# ---- kernel calls -------------------------------------------------------------

def _workspace(kind, x):
    n = ctypes.c_int64()
    call(kind + "_bwd_workspace_size", x, ctypes.byref(n))
    return torch.empty(n.value, dtype=torch.uint8, device=x.device)


def _row_stats(x):
    return torch.empty(x.shape[:-1], dtype=torch.float32, device=x.device)


def rms_norm_kernel(x, weight, eps):
    y, rstd = torch.empty_like(x), _row_stats(x)
    call("rmsnorm_fwd", x, weight, float(eps), y, rstd, encoder(x))
    return y, rstd


def rms_norm_backward_kernel(dy, x, weight, rstd, want_dw):
    """(dx, dweight); dweight None unless want_dw."""
    dx = torch.empty_like(x)
    dw = torch.empty_like(weight) if want_dw else None
    ws = _workspace("rmsnorm", x) if want_dw else None
    call("rmsnorm_bwd", dy.contiguous(), x, weight, rstd, dx, dw, ws, encoder(x))
    return dx, dw


def layer_norm_kernel(x, weight, bias, eps):
    y, mean, rstd = torch.empty_like(x), _row_stats(x), _row_stats(x)
    call("layernorm_fwd", x, weight, bias, float(eps), y, mean, rstd, encoder(x))
    return y, mean, rstd


def layer_norm_backward_kernel(dy, x, weight, mean, rstd, want_dw, want_db):
    """(dx, dweight, dbias); each gradient None unless wanted."""
    dx = torch.empty_like(x)
    dw = torch.empty_like(weight) if want_dw else None
    db = torch.empty(x.shape[-1], dtype=x.dtype, device=x.device) if want_db else None
    ws = _workspace("layernorm", x) if (want_dw or want_db) else None
    call("layernorm_bwd", dy.contiguous(), x, weight, mean, rstd, dx, dw, db, ws, encoder(x))
    return dx, dw, db


def softmax_kernel(x, upcast=False):
    """y = softmax(x) in x's dtype, or float32 (upcast, for a 16-bit x)."""
    y = torch.empty_like(x, dtype=torch.float32 if upcast else x.dtype)
    CALLS["softmax_fwd"] += 1
    check(lib.mc_softmax_fwd(describe(x), describe(y), encoder(x)))  # direct: small calls are common
    return y


def softmax_backward_kernel(dy, y):
    dx = torch.empty_like(y)
    call("softmax_bwd", dy.contiguous(), y, dx, encoder(y))
    return dx


def gelu_kernel(x, tanh_form):
    y = torch.empty_like(x)
    CALLS["gelu_fwd"] += 1
    check(lib.mc_gelu_fwd(describe(x), int(tanh_form), describe(y), encoder(x)))
    return y


def gelu_backward_kernel(dy, x, tanh_form):
    dx = torch.empty_like(x)
    call("gelu_bwd", dy.contiguous(), x, int(tanh_form), dx, encoder(x))
    return dx


def silu_kernel(x):
    y = torch.empty_like(x)
    CALLS["silu_fwd"] += 1
    check(lib.mc_silu_fwd(describe(x), describe(y), encoder(x)))
    return y


def silu_backward_kernel(dy, x):
    dx = torch.empty_like(x)
    call("silu_bwd", dy.contiguous(), x, dx, encoder(x))
    return dx


def fused_add_rms_norm_kernel(x, residual, weight, eps):
    y, out = torch.empty_like(x), torch.empty_like(residual)
    call("fused_add_rmsnorm_fwd", x, residual, weight, float(eps), y, out, None, encoder(x))
    return y, out


class _BackwardKernels:
    """The backward kernels the backward functions below call: the direct
    calls, or (custom ops) the registered backward ops, which torch.compile
    traces where it could not trace a ctypes call."""
    rms_norm = staticmethod(rms_norm_backward_kernel)
    layer_norm = staticmethod(layer_norm_backward_kernel)
    softmax = staticmethod(softmax_backward_kernel)
    gelu = staticmethod(gelu_backward_kernel)
    silu = staticmethod(silu_backward_kernel)


BACKWARD = _BackwardKernels()


# ---- the backward of each op, shared by both autograd paths --------------------

def vjp(fn, inputs, dy, needs):
    """The gradients of fn(*inputs) (PyTorch's own ops) for dy, themselves
    differentiable: the backward used when the graph of the backward is
    being built (create_graph), so that a second derivative is PyTorch's."""
    with torch.enable_grad():
        wrt = [t for t, n in zip(inputs, needs) if n]
        grads = iter(torch.autograd.grad(fn(*inputs), wrt, dy, create_graph=True, allow_unused=True))
    return tuple(next(grads) if n else None for n in needs)


def rms_norm_backward(dy, x, weight, rstd, eps, needs):
    """(dx, dweight) for the inputs (x, weight) that need them."""
    if torch.is_grad_enabled():
        return vjp(lambda x, w: _torch_rms_norm(x, w, eps), (x, weight), dy, needs)
    return BACKWARD.rms_norm(dy, x, weight, rstd, weight is not None and needs[1])


def layer_norm_backward(dy, x, weight, bias, mean, rstd, eps, needs):
    if torch.is_grad_enabled():
        return vjp(lambda x, w, b: _torch_layer_norm(x, x.shape[-1:], w, b, eps), (x, weight, bias), dy, needs)
    return BACKWARD.layer_norm(dy, x, weight, mean, rstd, weight is not None and needs[1],
                               bias is not None and needs[2])


def softmax_backward(dy, y, x_dtype):
    """dx in x's dtype (y is float32 where the forward upcast)."""
    if torch.is_grad_enabled():  # in ops on y, which differentiate through the softmax again
        dx = y * (dy - (dy * y).sum(-1, keepdim=True))
    else:
        dx = BACKWARD.softmax(dy.to(y.dtype), y)
    return dx.to(x_dtype)


def gelu_backward(dy, x, tanh_form):
    if torch.is_grad_enabled():
        approximate = "tanh" if tanh_form else "none"
        return vjp(lambda x: _torch_gelu(x, approximate=approximate), (x,), dy, (True,))[0]
    return BACKWARD.gelu(dy, x, tanh_form)


def silu_backward(dy, x):
    if torch.is_grad_enabled():
        return vjp(_torch_silu, (x,), dy, (True,))[0]
    return BACKWARD.silu(dy, x)


# ---- autograd.Function path (PyTorch before 2.4) -------------------------------

class _RMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, eps):
        y, rstd = rms_norm_kernel(x, weight, eps)
        ctx.save_for_backward(x, weight, rstd)
        ctx.eps = eps
        return y

    @staticmethod
    def backward(ctx, dy):
        x, weight, rstd = ctx.saved_tensors
        return rms_norm_backward(dy, x, weight, rstd, ctx.eps, ctx.needs_input_grad[:2]) + (None,)


class _LayerNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, eps):
        y, mean, rstd = layer_norm_kernel(x, weight, bias, eps)
        ctx.save_for_backward(x, weight, bias, mean, rstd)
        ctx.eps = eps
        return y

    @staticmethod
    def backward(ctx, dy):
        x, weight, bias, mean, rstd = ctx.saved_tensors
        return layer_norm_backward(dy, x, weight, bias, mean, rstd, ctx.eps, ctx.needs_input_grad[:3]) + (None,)


class _Softmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, upcast):
        y = softmax_kernel(x, upcast)
        ctx.save_for_backward(y)
        ctx.x_dtype = x.dtype
        return y

    @staticmethod
    def backward(ctx, dy):
        (y,) = ctx.saved_tensors
        return softmax_backward(dy, y, ctx.x_dtype), None


class _Gelu(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, tanh_form):
        ctx.save_for_backward(x)
        ctx.tanh_form = tanh_form
        return gelu_kernel(x, tanh_form)

    @staticmethod
    def backward(ctx, dy):
        (x,) = ctx.saved_tensors
        return gelu_backward(dy, x, ctx.tanh_form), None


class _Silu(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return silu_kernel(x)

    @staticmethod
    def backward(ctx, dy):
        (x,) = ctx.saved_tensors
        return silu_backward(dy, x)


def _differentiable(x):
    return x.requires_grad and torch.is_grad_enabled()


# The ops as the functions below call them: torch.ops.metalcore where this
# PyTorch has custom ops (CUSTOM_OPS), else the autograd.Functions (straight
# to the kernel when no gradient is wanted: autograd's bookkeeping is most of
# a small call's cost).
def _rms_norm_op(x, weight, eps):
    return _RMSNorm.apply(x, weight, eps)


def _layer_norm_op(x, weight, bias, eps):
    return _LayerNorm.apply(x, weight, bias, eps)


def _softmax_op(x, upcast):
    return _Softmax.apply(x, upcast) if _differentiable(x) else softmax_kernel(x, upcast)


def _gelu_op(x, tanh_form):
    return _Gelu.apply(x, tanh_form) if _differentiable(x) else gelu_kernel(x, tanh_form)


def _silu_op(x):
    return _Silu.apply(x) if _differentiable(x) else silu_kernel(x)


_fused_add_rms_norm_op = fused_add_rms_norm_kernel

CUSTOM_OPS = False
if hasattr(torch.library, "custom_op"):  # PyTorch 2.4 and later
    from . import _custom
    (_rms_norm_op, _layer_norm_op, _softmax_op, _gelu_op, _silu_op,
     _fused_add_rms_norm_op) = _custom.OPS
    CUSTOM_OPS = True


# ---- the public functions --------------------------------------------------------

def _need(ok, what):
    """Raises for an input metalcore does not take; False in a forked child,
    where the caller computes with PyTorch instead."""
    if not ok and forked():
        return False
    if not ok:
        raise ValueError(f"metalcore.{what}: unsupported input (dtype, device or layout); "
                         "the PyTorch overrides fall back to PyTorch for such inputs")
    return True


def rms_norm(x, weight=None, eps=1e-6):
    """x / sqrt(mean(x^2, -1) + eps) * weight, differentiable."""
    if not _need(supported(x, weight), "rms_norm"):
        return _torch_rms_norm(x, weight, eps)
    return rms_norm_unchecked(x, weight, eps)


# The *_unchecked forms are for callers that already know supported() holds
# (the overrides): they skip the second check.

def rms_norm_unchecked(x, weight, eps):
    return _rms_norm_op(x, weight, float(eps))


def fused_add_rms_norm(x, residual, weight=None, eps=1e-6):
    """Returns (rms_norm(x + residual) * weight, x + residual) in one pass
    (inference: not differentiable)."""
    if not _need(supported(x, residual, weight), "fused_add_rms_norm"):
        out = x + residual
        return _torch_rms_norm(out, weight, eps), out
    return _fused_add_rms_norm_op(x, residual, weight, float(eps))


def layer_norm(x, weight=None, bias=None, eps=1e-5):
    """LayerNorm over the last dimension, differentiable."""
    if not _need(supported(x, weight, bias), "layer_norm"):
        return _torch_layer_norm(x, x.shape[-1:], weight, bias, eps)
    return layer_norm_unchecked(x, weight, bias, eps)


def layer_norm_unchecked(x, weight, bias, eps):
    return _layer_norm_op(x, weight, bias, float(eps))


def softmax(x, dim=-1, dtype=None):
    """Softmax over the last dimension, differentiable; dtype: None (x's),
    x's, or float32 for a 16-bit x (computed, not cast afterwards)."""
    upcast = upcasts(x, dtype)
    if not _need(supported(x) and dim in (-1, x.dim() - 1) and (dtype in (None, x.dtype) or upcast), "softmax"):
        return _torch_softmax(x, dim, dtype=dtype)
    return softmax_unchecked(x, upcast)


def upcasts(x, dtype):
    """Whether softmax(x, dtype=dtype) is metalcore's float32 output of a
    16-bit x."""
    return dtype == torch.float32 and isinstance(x, torch.Tensor) and x.dtype in (torch.float16, torch.bfloat16)


def softmax_unchecked(x, upcast=False):
    return _softmax_op(x, upcast)


def gelu(x, approximate="none"):
    """GELU ('none': erf, 'tanh'), differentiable."""
    if not _need(supported(x) and approximate in ("none", "tanh"), "gelu"):
        return _torch_gelu(x, approximate=approximate)
    return gelu_unchecked(x, approximate)


def gelu_unchecked(x, approximate):
    return _gelu_op(x, approximate == "tanh")


def silu(x):
    """SiLU, differentiable."""
    if not _need(supported(x), "silu"):
        return _torch_silu(x)
    return silu_unchecked(x)


def silu_unchecked(x):
    return _silu_op(x)
