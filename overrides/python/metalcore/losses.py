"""Layer 4: the losses. metalcore.cross_entropy is F.cross_entropy for
logits [N, V] (or [V]) and int64 class targets, its loss and gradient from
one pass over the logits. Any other call, and every call under
torch.compile, a trace or in a forked child, is PyTorch's own
F.cross_entropy (counted in fallback_counts()): these functions never
refuse what PyTorch computes."""
import torch
import torch.nn.functional as F

from . import _lib, _ops

_torch_cross_entropy = F.cross_entropy
_REDUCTIONS = ("mean", "sum", "none")
_INT64 = (-2 ** 63, 2 ** 63)


def cross_entropy_refused(logits, target, ignore_index, label_smoothing, reduction):
    """Why metalcore does not compute this cross_entropy, or None (logits
    may be non-contiguous: it is copied)."""
    if _lib.compiling():
        return "compiling"
    why = _lib.unsupported_one(logits.contiguous() if isinstance(logits, torch.Tensor) else logits)
    if why is not None:
        return why
    if logits.dim() > 2:
        return "class dimension other than the last"
    if logits.shape[-1] == 0:
        return "no classes"
    if type(target) not in (torch.Tensor,) or target.dtype != torch.int64:
        return "target not int64 class indices"
    if target.device != logits.device or target.shape != logits.shape[:-1]:
        return "target not one class per row of logits on their device"
    if reduction not in _REDUCTIONS:
        return f"reduction {reduction!r}"
    if not (isinstance(label_smoothing, (int, float)) and 0 <= label_smoothing <= 1):
        return f"label_smoothing {label_smoothing!r}"
    if not (isinstance(ignore_index, int) and _INT64[0] <= ignore_index < _INT64[1]):
        return f"ignore_index {ignore_index!r}"
    return None


def cross_entropy(logits, target, *, ignore_index=-100, label_smoothing=0.0, reduction="mean"):
    """F.cross_entropy(logits, target, ignore_index=, label_smoothing=,
    reduction=) for logits [N, V] or [V] (float32, float16, bfloat16) and
    int64 targets [N] or []: computed in float32, returned in logits'
    dtype, differentiable in logits."""
    why = cross_entropy_refused(logits, target, ignore_index, label_smoothing, reduction)
    if why is not None:
        if why not in _lib.PYTORCH_RUNS:
            _lib.fell_back("cross_entropy", why)
        return _torch_cross_entropy(logits, target, ignore_index=ignore_index, label_smoothing=label_smoothing,
                                    reduction=reduction)
    one = logits.dim() == 1
    x, t = logits.contiguous(), target.contiguous()
    if one:
        x, t = x.unsqueeze(0), t.reshape(1)
    loss = _ops.cross_entropy(x, t, int(ignore_index), float(label_smoothing), reduction)
    return loss.reshape(()) if one and reduction == "none" else loss


__all__ = ["cross_entropy"]
