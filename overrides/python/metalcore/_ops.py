"""Layer 3: each op's entry point, for callers that know the library takes
the input (_lib.unsupported is None). Eager calls go to the kernel call,
through an autograd Function only where a gradient is wanted; under
torch.compile the call is the custom op (torch.ops.metalcore.*, PyTorch 2.4
and later), which the compiler traces without a graph break."""
import torch

from . import _autograd, _kernels
from ._lib import compiling

CUSTOM_OPS = hasattr(torch.library, "custom_op")
if CUSTOM_OPS:
    from . import _custom  # noqa: F401  (registers torch.ops.metalcore)

_grad_enabled = torch.is_grad_enabled


def _wants_grad(x, weight, bias=None):
    return _grad_enabled() and (x.requires_grad or (weight is not None and weight.requires_grad) or
                                (bias is not None and bias.requires_grad))


# forms: the Forms _lib.admit gave for the input tensors (never under
# torch.compile), or None. (The norms ask _wants_grad's question inline: a
# Python call costs the eager path most of a microsecond on a slow host.)

def rms_norm(x, weight, eps, forms=None):
    if forms is None and compiling():
        return torch.ops.metalcore.rms_norm(x, weight, eps)[0]
    if _grad_enabled() and (x.requires_grad or (weight is not None and weight.requires_grad)):
        return _autograd.rms_norm(x, weight, eps, forms)
    return _kernels.rms_norm(x, weight, eps, False, forms)[0]


def layer_norm(x, weight, bias, eps, forms=None):
    if forms is None and compiling():
        return torch.ops.metalcore.layer_norm(x, weight, bias, eps)[0]
    if _grad_enabled() and (x.requires_grad or (weight is not None and weight.requires_grad) or
                            (bias is not None and bias.requires_grad)):
        return _autograd.layer_norm(x, weight, bias, eps, forms)
    return _kernels.layer_norm(x, weight, bias, eps, False, forms)[0]


def softmax(x, upcast=False, forms=None):
    if forms is None and compiling():
        return torch.ops.metalcore.softmax(x, upcast)
    if _grad_enabled() and x.requires_grad:
        return _autograd.softmax(x, upcast, forms)
    return _kernels.softmax(x, upcast, forms)


def gelu(x, tanh_form, forms=None):
    if forms is None and compiling():
        return torch.ops.metalcore.gelu(x, tanh_form)
    if _grad_enabled() and x.requires_grad:
        return _autograd.gelu(x, tanh_form, forms)
    return _kernels.gelu(x, tanh_form, forms=forms)


def silu(x, forms=None):
    if forms is None and compiling():
        return torch.ops.metalcore.silu(x)
    if _grad_enabled() and x.requires_grad:
        return _autograd.silu(x, forms)
    return _kernels.silu(x, forms=forms)


def fused_add_rms_norm(x, residual, weight, eps, forms=None):
    """(y, x + residual); not differentiable."""
    if forms is None and compiling():
        return tuple(torch.ops.metalcore.fused_add_rms_norm(x, residual, weight, eps))
    return _kernels.fused_add_rms_norm(x, residual, weight, eps, forms)


def qr(a, mode):
    if compiling():
        return tuple(torch.ops.metalcore.qr(a, mode))
    return _kernels.qr(a, mode)


def cholesky(a, upper):
    """(factor, info) of a contiguous [..., n, n]."""
    if compiling():
        return tuple(torch.ops.metalcore.cholesky(a, upper))
    if _grad_enabled() and a.requires_grad:
        return _autograd.Cholesky.apply(a, upper)
    return _kernels.cholesky(a, upper)


def eigh(a, upper, vectors):
    """(w, v, info) of a contiguous [..., n, n]; v None unless vectors."""
    if compiling():
        w, v, info = torch.ops.metalcore.eigh(a, upper, vectors)
        return w, (v if vectors else None), info
    if vectors and _grad_enabled() and a.requires_grad:
        return _autograd.Eigh.apply(a, upper)
    return _kernels.eigh(a, upper, vectors)


def svd(a, vectors):
    """(u, s, vh, info) of a contiguous [..., m, n], thin; u and vh None
    unless vectors."""
    if compiling():
        u, s, vh, info = torch.ops.metalcore.svd(a, vectors)
        return (u, s, vh, info) if vectors else (None, s, None, info)
    if vectors and _grad_enabled() and a.requires_grad:
        return _autograd.SVD.apply(a)
    return _kernels.svd(a, vectors)


def solve(a, b):
    """(x, info) of contiguous a [..., n, n] and b [..., n, k], one batch
    shape."""
    if compiling():
        return tuple(torch.ops.metalcore.solve(a, b))
    if _grad_enabled() and (a.requires_grad or b.requires_grad):
        return _autograd.Solve.apply(a, b)
    return _kernels.solve(a, b)


def cross_entropy(logits, target, ignore_index, smoothing, reduction):
    """logits [N, V], target [N] (contiguous)."""
    if compiling():
        rows = torch.ops.metalcore.cross_entropy(logits, target, ignore_index, smoothing)[0]
        return _autograd.reduce_loss(rows, (target != ignore_index).sum(), reduction, logits.dtype)
    if _grad_enabled() and logits.requires_grad:
        return _autograd.CrossEntropy.apply(logits, target, ignore_index, smoothing, reduction)
    rows = _kernels.cross_entropy(logits, target, ignore_index, smoothing, None)
    return _autograd.reduce_loss(rows, (target != ignore_index).sum(), reduction, logits.dtype)


def glu(gate, up, kind):
    """act(gate) * up for contiguous tensors of one shape."""
    if compiling():
        return torch.ops.metalcore.glu(gate, up, kind)
    if _grad_enabled() and (gate.requires_grad or up.requires_grad):
        return _autograd.Glu.apply(gate, up, kind)
    return _kernels.glu(gate, up, kind)


def rope(q, k, cos, sin):
    """q, k [B, H, T, D] rotated by cos, sin [B or 1, T, D]."""
    if compiling():
        return torch.ops.metalcore.rope(q, cos, sin, False), torch.ops.metalcore.rope(k, cos, sin, False)
    if _grad_enabled() and (q.requires_grad or k.requires_grad):
        return _autograd.Rope.apply(q, k, cos, sin)
    return _kernels.rope(q, cos, sin), _kernels.rope(k, cos, sin)
