"""metalcore.linalg.qr: batched Householder QR (CPU)."""
import torch

from ._lib import available, call
from ._ops import supported

_MODES = {"reduced": 0, "complete": 1, "r": 2}


def takes(a, mode):
    """Whether metalcore computes this call (CPU tensors, float32/16/bf16,
    contiguous, at least 2-D, a known mode, no gradient wanted: metalcore has
    no QR backward, so a differentiable call stays with PyTorch)."""
    return (isinstance(a, torch.Tensor) and mode in _MODES and a.dim() >= 2 and a.device.type == "cpu" and
            available("cpu") and supported(a) and not (a.requires_grad and torch.is_grad_enabled()))


def qr(a, mode="reduced"):
    """(Q, R) as torch.linalg.qr returns them (Q empty in mode 'r')."""
    if not takes(a, mode):
        raise ValueError("metalcore.linalg.qr: unsupported input (device, dtype, layout, mode, or gradient wanted)")
    return qr_unchecked(a, mode)


def qr_unchecked(a, mode):
    m, n = a.shape[-2:]
    k = min(m, n)
    batch = a.shape[:-2]
    rows, cols = (m, m) if mode == "complete" else (k, k)
    r = torch.empty(*batch, rows, n, dtype=a.dtype)
    q = torch.empty(*batch, m, cols, dtype=a.dtype) if mode != "r" else None
    call("qr", a, _MODES[mode], q, r, None, None)
    return (q if q is not None else torch.empty(0, dtype=a.dtype)), r
