"""Layer 4: metalcore.linalg.qr, batched Householder QR (CPU and CUDA)."""
import torch

from . import _lib, _ops
from ._kernels import QR_MODES

_torch_qr = torch.linalg.qr  # PyTorch's own, where PyTorch must run


def why_not(a, mode):
    """Why metalcore does not compute this call, or None: it takes CPU and
    CUDA tensors, float32/16/bf16, contiguous, at least 2-D, a known mode,
    and no gradient wanted (metalcore has no QR backward, so a
    differentiable call stays with PyTorch)."""
    if mode not in QR_MODES:
        return f"mode {mode!r}"
    if isinstance(a, torch.Tensor) and a.dim() < 2:
        return "fewer than 2 dimensions"
    why = _lib.unsupported_one(a)
    if why is None and a.requires_grad and torch.is_grad_enabled():
        why = "gradient wanted"
    return why


def takes(a, mode):
    """Whether metalcore computes this call (why_not is None)."""
    return why_not(a, mode) is None


def qr(a, mode="reduced"):
    """(Q, R) as torch.linalg.qr returns them (Q empty in mode 'r')."""
    why = why_not(a, mode)
    if why is None:
        return _ops.qr(a, mode)
    if why in _lib.PYTORCH_RUNS:
        return tuple(_torch_qr(a, mode))
    raise ValueError(f"metalcore.linalg.qr: {why} (torch.linalg.qr's override falls back to PyTorch where "
                     "metalcore does not take the input)")
