"""metalcore.linalg.qr: batched Householder QR (CPU and CUDA)."""
import ctypes

import torch

from ._lib import call, encoder, forked
from . import _ops
from ._ops import unsupported

_MODES = {"reduced": 0, "complete": 1, "r": 2}
_torch_qr = torch.linalg.qr  # PyTorch's own, for a forked child


def why_not(a, mode):
    """Why metalcore does not compute this call, or None: it takes CPU and
    CUDA tensors, float32/16/bf16, contiguous, at least 2-D, a known mode,
    and no gradient wanted (metalcore has no QR backward, so a
    differentiable call stays with PyTorch)."""
    if mode not in _MODES:
        return f"mode {mode!r}"
    if isinstance(a, torch.Tensor) and a.dim() < 2:
        return "fewer than 2 dimensions"
    why = unsupported(a)
    if why is None and a.requires_grad and torch.is_grad_enabled():
        why = "gradient wanted"
    return why


def takes(a, mode):
    """Whether metalcore computes this call (why_not is None)."""
    return why_not(a, mode) is None


def qr(a, mode="reduced"):
    """(Q, R) as torch.linalg.qr returns them (Q empty in mode 'r')."""
    if not takes(a, mode):
        if forked():
            return _torch_qr(a, mode)
        raise ValueError("metalcore.linalg.qr: unsupported input (device, dtype, layout, mode, or gradient wanted)")
    return qr_unchecked(a, mode)


def shapes(a, mode):
    """((q rows, q cols), (r rows, r cols)) of each matrix; q is 0 x 0 in
    mode 'r' (torch.linalg.qr's empty Q)."""
    m, n = a.shape[-2:]
    k = min(m, n)
    if mode == "r":
        return (0, 0), (k, n)
    if mode == "complete":
        return (m, m), (m, n)
    return (m, k), (k, n)


def qr_kernel(a, mode):
    """(q, r) from the library; q empty in mode 'r'."""
    (qm, qc), (rr, n) = shapes(a, mode)
    batch = a.shape[:-2]
    r = torch.empty(*batch, rr, n, dtype=a.dtype, device=a.device)
    q = torch.empty(*batch, qm, qc, dtype=a.dtype, device=a.device) if mode != "r" else None
    size = ctypes.c_int64()
    call("qr_workspace_size", a, _MODES[mode], ctypes.byref(size))
    ws = torch.empty(size.value, dtype=torch.uint8, device=a.device) if size.value else None
    call("qr", a, _MODES[mode], q, r, ws, encoder(a))
    return (q if q is not None else torch.empty(0, dtype=a.dtype, device=a.device)), r


def qr_unchecked(a, mode):
    if _ops.CUSTOM_OPS:
        return tuple(torch.ops.metalcore.qr(a, mode))
    return qr_kernel(a, mode)
