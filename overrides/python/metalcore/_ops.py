"""metalcore's ops as autograd-aware torch functions."""
import ctypes

import torch
import torch.nn.functional as F

from ._lib import available, call, check, describe, encoder, forked, lib

# PyTorch's own functions, taken before any override is installed: the
# differentiable backward and the forked-child fallback compute with them.
_torch_gelu, _torch_silu, _torch_softmax, _torch_layer_norm = F.gelu, F.silu, F.softmax, F.layer_norm


def _torch_rms_norm(x, weight, eps):
    xf = x.float()
    y = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
    return y if weight is None else y * weight


def _vjp(fn, inputs, dy, needs):
    """The gradients of fn(*inputs) (PyTorch's own ops) for dy, themselves
    differentiable: the backward used when the graph of the backward is
    being built (create_graph), so that a second derivative is PyTorch's."""
    with torch.enable_grad():
        wrt = [t for t, n in zip(inputs, needs) if n]
        grads = iter(torch.autograd.grad(fn(*inputs), wrt, dy, create_graph=True, allow_unused=True))
    return tuple(next(grads) if n else None for n in needs)

_FLOATS = (torch.float32, torch.float16, torch.bfloat16)

# Whether the ops are registered with torch.library (PyTorch 2.4 and later).
CUSTOM_OPS = False


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


def _workspace(kind, x):
    n = ctypes.c_int64()
    call(kind + "_bwd_workspace_size", x, ctypes.byref(n))
    return torch.empty(n.value, dtype=torch.uint8, device=x.device)


def _grad_out(dy):
    return dy.contiguous()


class _RMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, eps):
        y = torch.empty_like(x)
        rstd = torch.empty(x.shape[:-1], dtype=torch.float32, device=x.device)
        call("rmsnorm_fwd", x, weight, eps, y, rstd, encoder(x))
        ctx.save_for_backward(x, weight, rstd)
        ctx.eps = eps
        return y

    @staticmethod
    def backward(ctx, dy):
        x, weight, rstd = ctx.saved_tensors
        if torch.is_grad_enabled():
            return _vjp(lambda x, w: _torch_rms_norm(x, w, ctx.eps), (x, weight), dy, ctx.needs_input_grad[:2]) + (None,)
        dy = _grad_out(dy)
        dx = torch.empty_like(x)
        want_dw = weight is not None and ctx.needs_input_grad[1]
        dw = torch.empty_like(weight) if want_dw else None
        ws = _workspace("rmsnorm", x) if want_dw else None
        call("rmsnorm_bwd", dy, x, weight, rstd, dx, dw, ws, encoder(x))
        return dx, dw, None


class _LayerNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, eps):
        y = torch.empty_like(x)
        mean = torch.empty(x.shape[:-1], dtype=torch.float32, device=x.device)
        rstd = torch.empty_like(mean)
        call("layernorm_fwd", x, weight, bias, eps, y, mean, rstd, encoder(x))
        ctx.save_for_backward(x, weight, bias, mean, rstd)
        ctx.has_bias, ctx.eps = bias is not None, eps
        return y

    @staticmethod
    def backward(ctx, dy):
        x, weight, bias, mean, rstd = ctx.saved_tensors
        if torch.is_grad_enabled():
            return _vjp(lambda x, w, b: _torch_layer_norm(x, x.shape[-1:], w, b, ctx.eps), (x, weight, bias), dy,
                        ctx.needs_input_grad[:3]) + (None,)
        dy = _grad_out(dy)
        dx = torch.empty_like(x)
        want_dw = weight is not None and ctx.needs_input_grad[1]
        want_db = ctx.has_bias and ctx.needs_input_grad[2]
        dw = torch.empty_like(weight) if want_dw else None
        db = torch.empty(x.shape[-1], dtype=x.dtype, device=x.device) if want_db else None
        ws = _workspace("layernorm", x) if (want_dw or want_db) else None
        call("layernorm_bwd", dy, x, weight, mean, rstd, dx, dw, db, ws, encoder(x))
        return dx, dw, db, None


class _Softmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = torch.empty_like(x)
        check(lib.mc_softmax_fwd(describe(x), describe(y), encoder(x)))  # direct: small calls are common
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, dy):
        (y,) = ctx.saved_tensors
        if torch.is_grad_enabled():  # in ops on y, which differentiate through this function again
            return y * (dy - (dy * y).sum(-1, keepdim=True))
        dx = torch.empty_like(y)
        call("softmax_bwd", _grad_out(dy), y, dx, encoder(y))
        return dx


class _Gelu(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, tanh_form):
        y = torch.empty_like(x)
        check(lib.mc_gelu_fwd(describe(x), ctypes.c_int32(int(tanh_form)), describe(y), encoder(x)))
        ctx.save_for_backward(x)
        ctx.tanh_form = int(tanh_form)
        return y

    @staticmethod
    def backward(ctx, dy):
        (x,) = ctx.saved_tensors
        if torch.is_grad_enabled():
            approximate = "tanh" if ctx.tanh_form else "none"
            return _vjp(lambda x: _torch_gelu(x, approximate=approximate), (x,), dy, (True,)) + (None,)
        dx = torch.empty_like(x)
        call("gelu_bwd", _grad_out(dy), x, ctx.tanh_form, dx, encoder(x))
        return dx, None


class _Silu(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = torch.empty_like(x)
        check(lib.mc_silu_fwd(describe(x), describe(y), encoder(x)))
        ctx.save_for_backward(x)
        return y

    @staticmethod
    def backward(ctx, dy):
        (x,) = ctx.saved_tensors
        if torch.is_grad_enabled():
            return _vjp(_torch_silu, (x,), dy, (True,))[0]
        dx = torch.empty_like(x)
        call("silu_bwd", _grad_out(dy), x, dx, encoder(x))
        return dx


def _apply(fn, x, *args):
    """fn.apply, or straight to the forward when no gradient is wanted:
    autograd's bookkeeping is most of a small call's cost."""
    if x.requires_grad and torch.is_grad_enabled():
        return fn.apply(x, *args)
    return fn.forward(_NO_CTX, x, *args)


class _NoCtx:
    """Stands in for autograd's ctx when nothing is saved for backward."""
    def save_for_backward(self, *tensors):
        pass


_NO_CTX = _NoCtx()


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
    return _RMSNorm.apply(x, weight, float(eps))


def fused_add_rms_norm(x, residual, weight=None, eps=1e-6):
    """Returns (rms_norm(x + residual) * weight, x + residual) in one pass
    (inference: not differentiable)."""
    if not _need(supported(x, residual, weight), "fused_add_rms_norm"):
        out = x + residual
        return _torch_rms_norm(out, weight, eps), out
    y, out = torch.empty_like(x), torch.empty_like(residual)
    call("fused_add_rmsnorm_fwd", x, residual, weight, float(eps), y, out, None, encoder(x))
    return y, out


def layer_norm(x, weight=None, bias=None, eps=1e-5):
    """LayerNorm over the last dimension, differentiable."""
    if not _need(supported(x, weight, bias), "layer_norm"):
        return _torch_layer_norm(x, x.shape[-1:], weight, bias, eps)
    return layer_norm_unchecked(x, weight, bias, eps)


def layer_norm_unchecked(x, weight, bias, eps):
    return _LayerNorm.apply(x, weight, bias, float(eps))


def softmax(x, dim=-1):
    """Softmax over the last dimension, differentiable."""
    if not _need(supported(x) and dim in (-1, x.dim() - 1), "softmax"):
        return _torch_softmax(x, dim)
    return softmax_unchecked(x)


def softmax_unchecked(x):
    return _apply(_Softmax, x)


def gelu(x, approximate="none"):
    """GELU ('none': erf, 'tanh'), differentiable."""
    if not _need(supported(x) and approximate in ("none", "tanh"), "gelu"):
        return _torch_gelu(x, approximate=approximate)
    return gelu_unchecked(x, approximate)


def gelu_unchecked(x, approximate):
    return _apply(_Gelu, x, approximate == "tanh")


def silu(x):
    """SiLU, differentiable."""
    if not _need(supported(x), "silu"):
        return _torch_silu(x)
    return silu_unchecked(x)


def silu_unchecked(x):
    return _apply(_Silu, x)
