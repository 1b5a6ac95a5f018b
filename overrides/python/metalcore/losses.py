"""Layer 4: the losses. metalcore.cross_entropy is F.cross_entropy for
logits [N, V] (or [V]) and int64 class targets, from one library call in
the forward and one in the backward. metalcore.linear_cross_entropy is
F.cross_entropy(F.linear(hidden, weight, bias).float(), target) without the
full logits. Any other call, and every call under torch.compile, a trace or
in a forked child, is PyTorch's own (counted in fallback_counts()): these
functions never refuse what PyTorch computes."""
import torch
import torch.nn.functional as F

from . import _autograd, _kernels, _lib, _ops

_torch_cross_entropy = F.cross_entropy
_REDUCTIONS = ("mean", "sum", "none")
_INT64 = (-2 ** 63, 2 ** 63)


def _call_refused(target, rows, device, ignore_index, label_smoothing, reduction):
    """Why a cross-entropy of rows (a shape) of logits on device with these
    arguments is not metalcore's, or None."""
    if type(target) is not torch.Tensor or target.dtype != torch.int64:
        return "target not int64 class indices"
    if target.device != device or target.shape != rows:
        return "target not one class per row of logits on their device"
    if reduction not in _REDUCTIONS:
        return f"reduction {reduction!r}"
    if not (isinstance(label_smoothing, (int, float)) and 0 <= label_smoothing <= 1):
        return f"label_smoothing {label_smoothing!r}"
    if not (isinstance(ignore_index, int) and _INT64[0] <= ignore_index < _INT64[1]):
        return f"ignore_index {ignore_index!r}"
    return None


def cross_entropy_refused(logits, target, ignore_index, label_smoothing, reduction):
    """Why metalcore does not compute this cross_entropy, or None (logits
    may be non-contiguous: it is copied)."""
    why = _lib.unsupported_any_layout(logits)
    if why is not None:
        return why
    if logits.dim() > 2:
        return "class dimension other than the last"
    if logits.shape[-1] == 0:
        return "no classes"
    return _call_refused(target, logits.shape[:-1], logits.device, ignore_index, label_smoothing, reduction)


def cross_entropy(logits, target, *, ignore_index=-100, label_smoothing=0.0, reduction="mean"):
    """F.cross_entropy(logits, target, ignore_index=, label_smoothing=,
    reduction=) for logits [N, V] or [V] (float32, float16, bfloat16) and
    int64 targets [N] or []: computed in float32, returned in logits'
    dtype, differentiable in logits."""
    why = cross_entropy_refused(logits, target, ignore_index, label_smoothing, reduction)
    if why is not None:
        _lib.pytorch_computes("cross_entropy", why)
        return _torch_cross_entropy(logits, target, ignore_index=ignore_index, label_smoothing=label_smoothing,
                                    reduction=reduction)
    one = logits.dim() == 1
    x, t = logits.contiguous(), target.contiguous()
    if one:
        x, t = x.unsqueeze(0), t.reshape(1)
    loss = _ops.cross_entropy(x, t, int(ignore_index), float(label_smoothing), reduction)
    return loss.reshape(()) if one and reduction == "none" else loss


# A chunk's logits take at most this share of the full float32 logits'
# memory (and at least 64 MiB worth: one chunk where the whole problem is
# small, and no GEMM of a few hundred rows, slower a row than PyTorch's one
# large GEMM, where it is not). The step's growth is then the gradients of
# weight and hidden and a chunk: under 30% of the logits once rows outnumber
# 3.3 hidden widths (the gradient of weight alone is V x H); 15% made it 30%
# at 8192 rows.
_CHUNK_SHARE, _CHUNK_FLOOR = 0.10, 64 << 20


def chunk_rows(n, v):
    """Rows per chunk of linear_cross_entropy for n rows of v classes (its
    logits, in hidden's dtype, at most 4 bytes a logit)."""
    budget = max(_CHUNK_FLOOR, _CHUNK_SHARE * 4 * n * v)
    return max(1, min(n, int(budget // (4 * max(v, 1)))))


def linear_cross_entropy_refused(hidden, weight, target, bias, ignore_index, label_smoothing, reduction):
    """Why metalcore does not compute this linear_cross_entropy, or None."""
    if _lib.compiling() and reduction == "none":
        return "reduction 'none' under torch.compile"
    why = _lib.unsupported(hidden, weight, bias)
    if why is not None:
        return why
    if hidden.dim() > 2:  # the PyTorch expression takes dimension 1 for the classes then
        return "hidden of more than 2 dimensions"
    if weight.dim() != 2 or weight.shape[1] != hidden.shape[-1] or (bias is not None and
                                                                     bias.shape != weight.shape[:1]):
        return "weight or bias not [V, H] and [V] for hidden [..., H]"
    if reduction == "none" and torch.is_grad_enabled() and any(
            t is not None and t.requires_grad for t in (hidden, weight, bias)):
        return "reduction 'none' with a gradient wanted"
    if weight.shape[0] == 0:
        return "no classes"
    return _call_refused(target, hidden.shape[:-1], hidden.device, ignore_index, label_smoothing, reduction)


def linear_cross_entropy(hidden, weight, target, bias=None, *, ignore_index=-100, label_smoothing=0.0,
                         reduction="mean"):
    """F.cross_entropy(F.linear(hidden, weight, bias).float(), target, ...)
    (float32), for hidden [N, H] or [H], weight [V, H], bias [V] and int64
    targets [N] or [], in chunks of rows sized from memory: the full logits
    never exist, and the gradients of hidden, weight and bias are made in
    the forward."""
    why = linear_cross_entropy_refused(hidden, weight, target, bias, ignore_index, label_smoothing, reduction)
    if why is not None:
        _lib.pytorch_computes("linear_cross_entropy", why)
        return _torch_cross_entropy(F.linear(hidden, weight, bias).float(), target, ignore_index=ignore_index,
                                    label_smoothing=label_smoothing, reduction=reduction)
    h, t = hidden.reshape(-1, hidden.shape[-1]), target.reshape(-1)
    chunk = chunk_rows(h.shape[0], weight.shape[0])
    if reduction == "none":  # no gradient wanted (else PyTorch's): each row's loss, chunk by chunk
        rows = h.new_empty(h.shape[0], dtype=torch.float32)
        for i in range(0, h.shape[0], chunk):  # float32 losses of the logits read as float32
            rows[i:i + chunk] = _kernels.cross_entropy(F.linear(h[i:i + chunk], weight, bias), t[i:i + chunk],
                                                       int(ignore_index), float(label_smoothing), None)
        return rows.reshape(target.shape)
    if _lib.compiling():  # the custom op: the gradients made in the forward, wanted as the inputs say
        want = [x is not None and x.requires_grad and torch.is_grad_enabled() for x in (h, weight, bias)]
        return torch.ops.metalcore.linear_cross_entropy(h, weight, bias, t, int(ignore_index), float(label_smoothing),
                                                        reduction == "mean", chunk, *want)[0]
    return _autograd.LinearCrossEntropy.apply(h, weight, bias, t, int(ignore_index), float(label_smoothing),
                                              reduction, chunk)


__all__ = ["cross_entropy", "linear_cross_entropy"]
