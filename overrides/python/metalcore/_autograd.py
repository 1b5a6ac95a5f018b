"""Layer 3: the ops as torch.autograd.Functions over the kernel calls: the
eager path, on every PyTorch (a Function's bookkeeping is a few
microseconds; the torch.library dispatcher's is tens)."""
import torch

from . import _backward, _kernels

# PyTorch 2 puts a Python layer over a Function's apply (for functorch's
# transforms) that costs a few microseconds a call; the callers here have
# refused calls under a transform (_lib.admit), so the C apply under it is
# called straight (PyTorch 1.13's apply is that C apply).
_c_apply = torch._C._FunctionBase.__dict__["apply"]


def direct(cls):
    """cls.apply without PyTorch 2's Python layer, for callers that have
    refused calls under a functorch transform."""
    return _c_apply.__get__(None, cls)


# The norms' and activations' forwards take the Forms of their input
# tensors from _lib.admit (or None), for the kernel call.

class RMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, eps, forms):
        y, rstd = _kernels.rms_norm(x, weight, eps, True, forms)
        ctx.save_for_backward(x, weight, rstd)
        ctx.eps, ctx.forms = eps, forms
        return y

    @staticmethod
    def backward(ctx, dy):
        x, weight, rstd = ctx.saved_tensors
        return _backward.rms_norm(_kernels, dy, x, weight, rstd, ctx.eps, ctx.needs_input_grad[:2],
                                  ctx.forms) + (None, None)


class LayerNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, eps, forms):
        y, stats = _kernels.layer_norm(x, weight, bias, eps, True, forms)
        ctx.save_for_backward(x, weight, bias, stats)
        ctx.eps, ctx.forms = eps, forms
        return y

    @staticmethod
    def backward(ctx, dy):
        x, weight, bias, stats = ctx.saved_tensors
        return _backward.layer_norm(_kernels, dy, x, weight, bias, stats, ctx.eps, ctx.needs_input_grad[:3],
                                    ctx.forms) + (None, None)


class Softmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, upcast, forms):
        y = _kernels.softmax(x, upcast, forms)
        ctx.save_for_backward(y)
        ctx.x_dtype = x.dtype
        return y

    @staticmethod
    def backward(ctx, dy):
        (y,) = ctx.saved_tensors
        return _backward.softmax(_kernels, dy, y, ctx.x_dtype), None, None


class Gelu(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, tanh_form, forms):
        ctx.save_for_backward(x)
        ctx.tanh_form = tanh_form
        return _kernels.gelu(x, tanh_form, forms=forms)

    @staticmethod
    def backward(ctx, dy):
        (x,) = ctx.saved_tensors
        return _backward.gelu(_kernels, dy, x, ctx.tanh_form), None, None


class Silu(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, forms):
        ctx.save_for_backward(x)
        return _kernels.silu(x, forms=forms)

    @staticmethod
    def backward(ctx, dy):
        (x,) = ctx.saved_tensors
        return _backward.silu(_kernels, dy, x), None


rms_norm, layer_norm, softmax, gelu, silu = map(direct, (RMSNorm, LayerNorm, Softmax, Gelu, Silu))


class Glu(torch.autograd.Function):
    @staticmethod
    def forward(ctx, gate, up, kind):
        ctx.save_for_backward(gate, up)
        ctx.kind = kind
        return _kernels.glu(gate, up, kind)

    @staticmethod
    def backward(ctx, dy):
        gate, up = ctx.saved_tensors
        return _backward.glu(_kernels, dy, gate, up, ctx.kind) + (None,)


class Rope(torch.autograd.Function):
    """q and k rotated (two library calls), each in its own layout; the
    backward rotates their gradients back (the transposed rotation) into the
    same layouts, so that a model's transposed q and k get gradients its
    reshapes take as views. cos and sin take no gradient."""

    @staticmethod
    def forward(ctx, q, k, cos, sin):
        ctx.save_for_backward(cos, sin)
        qe, ke = _kernels.rope(q, cos, sin), _kernels.rope(k, cos, sin)
        ctx.strides = qe.stride(), ke.stride()
        return qe, ke

    @staticmethod
    def backward(ctx, dq, dk):
        cos, sin = ctx.saved_tensors
        return tuple(None if d is None else _backward.rope(_kernels, d, cos, sin, st)
                     for d, st in zip((dq, dk), ctx.strides)) + (None, None)


class Cholesky(torch.autograd.Function):
    """The factor and info from one library call; the backward is
    PyTorch's formula on the factor (create_graph included: it is made of
    PyTorch's differentiable ops)."""

    @staticmethod
    def forward(ctx, a, upper):
        l, info = _kernels.cholesky(a, upper)
        ctx.mark_non_differentiable(info)
        ctx.save_for_backward(l)
        ctx.upper = upper
        return l, info

    @staticmethod
    def backward(ctx, gl, _):
        (l,) = ctx.saved_tensors
        return _backward.cholesky(l, gl, ctx.upper), None


class Eigh(torch.autograd.Function):
    """Eigenvalues, eigenvectors and info from one library call; the
    backward is PyTorch's formula on them."""

    @staticmethod
    def forward(ctx, a, upper):
        w, v, info = _kernels.eigh(a, upper)
        ctx.mark_non_differentiable(info)
        ctx.save_for_backward(w, v)
        return w, v, info

    @staticmethod
    def backward(ctx, gw, gv, _):
        w, v = ctx.saved_tensors
        return _backward.eigh(gw, gv, w, v), None


class SVD(torch.autograd.Function):
    """U, S, Vh and info from one library call; the backward is PyTorch's
    formula on them."""

    @staticmethod
    def forward(ctx, a):
        u, s, vh, info = _kernels.svd(a)
        ctx.mark_non_differentiable(info)
        ctx.save_for_backward(u, s, vh)
        return u, s, vh, info

    @staticmethod
    def backward(ctx, gu, gs, gvh, _):
        return _backward.svd(gu, gs, gvh, *ctx.saved_tensors)


class Solve(torch.autograd.Function):
    """X and info from one library call; the backward is PyTorch's formula
    (another solve, with Aᵀ, and a product)."""

    @staticmethod
    def forward(ctx, a, b):
        x, info = _kernels.solve(a, b)
        ctx.mark_non_differentiable(info)
        ctx.save_for_backward(a, x)
        return x, info

    @staticmethod
    def backward(ctx, gx, _):
        a, x = ctx.saved_tensors
        return _backward.solve(_kernels, a, x, gx, ctx.needs_input_grad)


def reduce_loss(rows, count, reduction, dtype):
    """F.cross_entropy's reduction of the per-row float32 losses (count:
    the rows not ignored, an int64 tensor), in dtype."""
    if reduction == "mean":
        return (rows.sum() / count).to(dtype)
    if reduction == "sum":
        return rows.sum().to(dtype)
    return rows.to(dtype)


def scale_kept(ctx, grads, dloss):
    """The gradients a loss's forward computed (for a loss gradient of 1),
    each times dloss: scaled in place on the device, where a dloss of 1
    (loss.backward()) writes nothing and the host never reads it. A second
    backward through a kept graph scales by its dloss over the one before."""
    scale = dloss.float().reshape(1)
    applied, ctx.applied = getattr(ctx, "applied", None), scale
    factor = scale if applied is None else scale / applied
    for g in grads:
        if g is not None:
            _kernels.scale_gradient(g, factor)
    return grads


class CrossEntropy(torch.autograd.Function):
    """A scalar loss ('mean' or 'sum') and its gradient from one library
    call in the forward (the second read of each row hits the cache), kept
    for the backward, which scales it by the loss's gradient on the device:
    the logits are not kept. reduction 'none' (a gradient per row): each
    row's log-sum-exp in the forward, the gradient from one more read of the
    logits in the backward, scaled there."""

    @staticmethod
    def forward(ctx, logits, target, ignore_index, smoothing, reduction):
        count = (target != ignore_index).sum()
        ctx.args = ignore_index, smoothing, reduction
        if reduction == "none":
            rows, lse = _kernels.cross_entropy_forward(logits, target, ignore_index, smoothing)
            ctx.save_for_backward(logits, target, lse)
        else:
            grad = torch.empty_like(logits)
            scale = (1 / count.float()).reshape(1) if reduction == "mean" else None
            rows = _kernels.cross_entropy(logits, target, ignore_index, smoothing, scale, grad)
            ctx.save_for_backward(grad)
        return reduce_loss(rows, count, reduction, logits.dtype)

    @staticmethod
    def backward(ctx, dloss):
        ignore_index, smoothing, reduction = ctx.args
        if reduction == "none":
            logits, target, lse = ctx.saved_tensors
            grad = _kernels.cross_entropy_backward(logits, target, lse, ignore_index, smoothing,
                                                   dloss.float().reshape(-1).contiguous())
        else:
            (grad,) = scale_kept(ctx, ctx.saved_tensors, dloss)
        return grad, None, None, None, None


class LinearCrossEntropy(torch.autograd.Function):
    """cross_entropy(F.linear(hidden, weight, bias).float(), target) over
    chunks of rows: each chunk's logits are made by PyTorch's matmul, turned
    into their gradient in place by one library call (computing in float32),
    and folded into the gradients of hidden, weight and bias at once; the
    full logits never exist. reduction 'mean' or 'sum' (a scalar loss: the
    backward scales the kept gradients)."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, target, ignore_index, smoothing, reduction, chunk):
        count = (target != ignore_index).sum()
        scale = (1 / count.float()).reshape(1) if reduction == "mean" else None
        rows, dh, dw, db = _kernels.linear_cross_entropy(hidden, weight, bias, target, ignore_index, smoothing, scale,
                                                         chunk, ctx.needs_input_grad[:3])
        ctx.save_for_backward(dh, dw, db)
        return reduce_loss(rows, count, reduction, torch.float32)

    @staticmethod
    def backward(ctx, dloss):
        return (*scale_kept(ctx, ctx.saved_tensors, dloss), None, None, None, None, None)
