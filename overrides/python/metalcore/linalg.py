"""Layer 4: metalcore.linalg: batched Householder QR (CPU and CUDA) and
batched Cholesky (CPU, CUDA and MPS)."""
import torch

from . import _lib, _ops
from ._kernels import QR_MODES

# PyTorch's own, where PyTorch must run
_torch_qr, _torch_cholesky, _torch_cholesky_ex = torch.linalg.qr, torch.linalg.cholesky, torch.linalg.cholesky_ex
_LinAlgError = getattr(torch.linalg, "LinAlgError", RuntimeError)

# The largest order metalcore factors: what the GPU kernels hold on chip
# (MPS: Metal's 32 KB of threadgroup memory); larger matrices, on every
# device, are PyTorch's blocked LAPACK/cuSOLVER work.
MAX_CHOLESKY_ORDER = {"mps": 64}
_MAX_ORDER = 128


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


def cholesky_refused(a):
    """Why metalcore does not factor a, or None (a non-contiguous a is
    copied)."""
    why = _lib.unsupported_any_layout(a)
    if why is not None:
        return why
    if a.dim() < 2 or a.shape[-1] != a.shape[-2]:
        return "not square matrices"
    if a.shape[-1] > MAX_CHOLESKY_ORDER.get(a.device.type, _MAX_ORDER):
        return f"order above {MAX_CHOLESKY_ORDER.get(a.device.type, _MAX_ORDER)}"
    return None


def cholesky_ex(A, *, upper=False, check_errors=False):
    """torch.linalg.cholesky_ex(A, upper=, check_errors=): (L, info) for
    every matrix of A [..., n, n] (float32, float16, bfloat16; 16-bit
    computed in float32 and returned in A's dtype), reading one triangle;
    info (int32) 0 or the order of the first leading minor that is not
    positive-definite. Never waits for the device unless check_errors.
    Differentiable (PyTorch's formula). Other inputs are PyTorch's."""
    why = cholesky_refused(A)
    if why is not None:
        _lib.pytorch_computes("cholesky", why)
        return _torch_cholesky_ex(A, upper=upper, check_errors=check_errors)
    return factor(A, upper, "linalg.cholesky_ex" if check_errors else None)


def cholesky(A, *, upper=False):
    """torch.linalg.cholesky(A, upper=): cholesky_ex's factor, raising
    torch.linalg.LinAlgError, as PyTorch does, where a matrix is not
    positive-definite (which reads info: the host waits for the device).
    Under torch.compile PyTorch's own (the raise depends on the data)."""
    why = "raising under torch.compile" if _lib.compiling() else cholesky_refused(A)
    if why is not None:
        _lib.pytorch_computes("cholesky", why)
        return _torch_cholesky(A, upper=upper)
    return factor(A, upper, "linalg.cholesky")[0]


def factor(A, upper, raising_as=None):
    """(L, info) of A, which cholesky_refused takes; where raising_as names
    the function, PyTorch's error from it for the first matrix not
    positive-definite (the host reads info)."""
    l, info = _ops.cholesky(A.contiguous(), bool(upper))
    if raising_as is not None:
        _raise_for(info, raising_as)
    return l, info


def _raise_for(info, name):
    """PyTorch's error for the first matrix whose info is not 0."""
    bad = torch.nonzero(info.reshape(-1)).flatten()
    if bad.numel() == 0:
        return
    first = int(bad[0])
    where = f"(Batch element {first}): " if info.dim() > 0 else ""
    raise _LinAlgError(f"{name}: {where}The factorization could not be completed because the input is not "
                       f"positive-definite (the leading minor of order {int(info.reshape(-1)[first])} is not "
                       "positive-definite).")
