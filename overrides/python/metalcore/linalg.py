"""Layer 4: metalcore.linalg: batched Householder QR (CPU and CUDA),
batched Cholesky, linear systems, symmetric eigendecomposition and singular
value decomposition (CPU, CUDA and MPS)."""
import torch

from . import _lib, _ops
from ._kernels import QR_MODES

# PyTorch's own, where PyTorch must run
_torch_qr, _torch_cholesky, _torch_cholesky_ex = torch.linalg.qr, torch.linalg.cholesky, torch.linalg.cholesky_ex
_torch_solve, _torch_solve_ex = torch.linalg.solve, torch.linalg.solve_ex
_torch_eigh, _torch_eigvalsh = torch.linalg.eigh, torch.linalg.eigvalsh
_torch_svd, _torch_svdvals = torch.linalg.svd, torch.linalg.svdvals
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
        _raise_for(info, raising_as, lambda k: "The factorization could not be completed because the input is not "
                   f"positive-definite (the leading minor of order {k} is not positive-definite).")
    return l, info


def _raise_for(info, name, reason):
    """PyTorch's error from name for the first matrix whose info is not 0,
    reason(its info) saying what went wrong."""
    bad = torch.nonzero(info.reshape(-1)).flatten()
    if bad.numel() == 0:
        return
    first = int(bad[0])
    where = f"(Batch element {first}): " if info.dim() > 0 else ""
    raise _LinAlgError(f"{name}: {where}{reason(int(info.reshape(-1)[first]))}")


# The shared memory a block of the solve, eigh and svd GPU kernels may take
# (their families' maxCUDAShared and maxMetalShared): what decides the
# largest matrices they take, each family's own formula below.
_GPU_SHARED = {"cuda": 200 << 10, "mps": 32 << 10}

# What a GPU kernel of mc_solve holds on chip beyond 32 x 32 systems with up
# to 8 right-hand sides (n (n + k) + 4 floats of a block's shared memory).


def _is_vector(A, B):
    """PyTorch's rule: B is a (batch of) vector(s) where it is 1-D, or has
    A's shape without its last dimension."""
    return B.dim() == 1 or (B.dim() == A.dim() - 1 and B.shape == A.shape[:-1])


def solve_refused(A, B, left=True):
    """Why metalcore does not solve A X = B (X A = B unless left), or None
    (non-contiguous or broadcast operands are copied)."""
    why = _lib.unsupported_any_layout(A) or _lib.unsupported_any_layout(B)
    if why is not None:
        return why
    if A.dtype != B.dtype or A.device != B.device:
        return "A and B of different dtypes or devices"
    if A.dim() < 2 or A.shape[-1] != A.shape[-2]:
        return "not square matrices"
    n = A.shape[-1]
    vector = _is_vector(A, B)
    if vector and not left:  # PyTorch takes B as a column there and refuses the shapes
        return "a vector B with left=False"
    if B.dim() < 2 and not vector:
        return "B of fewer than 2 dimensions"
    rows = B.shape[-2] if left and not vector else B.shape[-1]
    if rows != n:
        return f"B of shape {list(B.shape)} for A of shape {list(A.shape)}"
    batch = B.shape[:-1 if vector else -2]
    if batch != A.shape[:-2]:
        try:
            torch.broadcast_shapes(A.shape[:-2], batch)
        except RuntimeError:
            return "batch dimensions that do not broadcast"
    if n > _MAX_ORDER:
        return f"order above {_MAX_ORDER}"
    k = 1 if vector else B.shape[-1] if left else B.shape[-2]
    most = _GPU_SHARED.get(A.device.type)
    if most is not None and (n > 32 or k > 8) and (n * (n + k) + 4) * 4 > most:
        return f"{k} right-hand sides of order {n}"
    return None


def solve_ex(A, B, *, left=True, check_errors=False):
    """torch.linalg.solve_ex(A, B, left=, check_errors=): (X, info) with
    A X = B (X A = B unless left) for every matrix of A [..., n, n] and B
    [..., n, k] or [..., n] (batch dimensions broadcast), by Gaussian
    elimination with partial pivoting; float32, float16 and bfloat16
    (16-bit computed in float32, returned in A's dtype); info (int32) 0, or
    the index + 1 of the first zero pivot (A singular: that X is NaN).
    Never waits for the device unless check_errors. Differentiable
    (PyTorch's formula). Other inputs are PyTorch's."""
    why = solve_refused(A, B, left)
    if why is not None:
        _lib.pytorch_computes("solve", why)
        return tuple(_torch_solve_ex(A, B, left=left, check_errors=check_errors))
    return systems(A, B, left, "torch.linalg.solve_ex" if check_errors else None)


def solve(A, B, *, left=True):
    """torch.linalg.solve(A, B, left=): solve_ex's X, raising
    torch.linalg.LinAlgError, as PyTorch does, for a singular matrix (which
    reads info: the host waits for the device). Under torch.compile
    PyTorch's own (the raise depends on the data)."""
    why = "raising under torch.compile" if _lib.compiling() else solve_refused(A, B, left)
    if why is not None:
        _lib.pytorch_computes("solve", why)
        return _torch_solve(A, B, left=left)
    return systems(A, B, left, "torch.linalg.solve")[0]


def systems(A, B, left, raising_as=None):
    """(X, info) for A and B, which solve_refused takes; where raising_as
    names the function, PyTorch's error from it for the first singular
    matrix (the host reads info)."""
    vector = _is_vector(A, B)  # only with left
    if not left:
        A, B = A.mT, B.mT
    elif vector:
        B = B.unsqueeze(-1)
    if A.shape[:-2] != B.shape[:-2]:
        batch = torch.broadcast_shapes(A.shape[:-2], B.shape[:-2])
        A, B = A.expand(*batch, *A.shape[-2:]), B.expand(*batch, *B.shape[-2:])
    x, info = _ops.solve(A.contiguous(), B.contiguous())
    if raising_as is not None:
        _raise_for(info, raising_as, lambda _: "The solver failed because the input matrix is singular.")
    return (x.squeeze(-1) if vector else x if left else x.mT), info


# What mc_eigh's GPU kernel holds on chip: the matrix (and its eigenvectors)
# at n (n + 1) floats each, and a little more (ops/eigh/gpu.go's
# matrixBytes). On the CPU the unblocked tridiagonal reduction past order
# 128 is slower per thread than PyTorch's LAPACK (bench/linalg.md), which
# computes those.
_EIGH_CPU_ORDER = 128


def eigh_refused(A, UPLO="L", vectors=True):
    """Why metalcore does not decompose A, or None (a non-contiguous A is
    copied)."""
    if UPLO not in ("L", "U"):
        return f"UPLO={UPLO!r}"
    why = _lib.unsupported_any_layout(A)
    if why is not None:
        return why
    if A.dim() < 2 or A.shape[-1] != A.shape[-2]:
        return "not square matrices"
    n = A.shape[-1]
    most = _GPU_SHARED.get(A.device.type)
    if most is None:
        return f"order above {_EIGH_CPU_ORDER}" if n > _EIGH_CPU_ORDER else None
    pairs = (n + 1) // 2
    if n > 32 and ((2 if vectors else 1) * n * (n + 1) + 5 * pairs + n + pairs * (pairs - 1) // 2 + 33) * 4 > most:
        return f"order {n} beyond what the GPU kernel holds"
    return None


def _decompose(A, UPLO, vectors, name):
    """(w, v or None) of A, which eigh_refused takes; PyTorch's error from
    name for the first matrix that did not converge or is not finite (the
    host reads info), unless compiling."""
    w, v, info = _ops.eigh(A.contiguous(), UPLO == "U", vectors)
    if not _lib.compiling():
        _raise_for(info, name, lambda k: "The algorithm failed to converge because the input matrix is "
                   f"ill-conditioned or has too many repeated eigenvalues (error code: {k}).")
    return w, v


def eigh(A, UPLO="L"):
    """torch.linalg.eigh(A, UPLO=): (eigenvalues ascending, eigenvectors in
    columns) of every symmetric matrix of A [..., n, n], reading its lower
    (UPLO='L') or upper triangle, by Jacobi rotations (on the CPU from
    order 32, tridiagonal reduction and QL iterations); float32, float16 and
    bfloat16 (16-bit computed in float32, returned in A's dtype). Raises
    torch.linalg.LinAlgError, as PyTorch does, for a matrix holding a NaN or
    an infinity (the host reads the library's info). Differentiable
    (PyTorch's formula). Other inputs are PyTorch's."""
    why = eigh_refused(A, UPLO)
    if why is not None:
        _lib.pytorch_computes("eigh", why)
        return _torch_eigh(A, UPLO=UPLO)
    return torch.return_types.linalg_eigh(_decompose(A, UPLO, True, "linalg.eigh"))


def eigvalsh(A, UPLO="L"):
    """torch.linalg.eigvalsh(A, UPLO=): eigh's eigenvalues (the eigenvectors
    are computed only where a gradient needs them)."""
    grad = A.requires_grad if isinstance(A, torch.Tensor) else False
    why = eigh_refused(A, UPLO, grad)
    if why is not None:
        _lib.pytorch_computes("eigvalsh", why)
        return _torch_eigvalsh(A, UPLO=UPLO)
    return _decompose(A, UPLO, grad, "linalg.eigvalsh")[0]


# What mc_svd's GPU kernel holds on chip: B (max(m, n) x k), with the
# vectors V (k x k), and a little more (ops/svd/gpu.go's matrixBytes). On
# the CPU past k = 256 PyTorch's LAPACK computes (measured up to 256 here,
# bench/linalg.md).
_SVD_CPU_ORDER = 256


def svd_refused(A, full_matrices=False, vectors=True):
    """Why metalcore does not decompose A, or None (a non-contiguous A is
    copied)."""
    why = _lib.unsupported_any_layout(A)
    if why is not None:
        return why
    if A.dim() < 2:
        return "fewer than 2 dimensions"
    m, n = A.shape[-2:]
    rows, k = max(m, n), min(m, n)
    if full_matrices and vectors and m != n:
        return "full_matrices for non-square matrices"
    most = _GPU_SHARED.get(A.device.type)
    if most is None:
        return f"min(m, n) above {_SVD_CPU_ORDER}" if k > _SVD_CPU_ORDER else None
    if (rows * k + (k * k if vectors else 0) + 2 * k + rows + 33) * 4 > most:
        return f"{m} x {n} beyond what the GPU kernel holds"
    return None


def _singular(A, vectors, name):
    """(U or None, S, Vh or None) of A, which svd_refused takes; PyTorch's
    error from name for the first matrix that did not converge or is not
    finite (the host reads info), unless compiling."""
    u, s, vh, info = _ops.svd(A.contiguous(), vectors)
    if not _lib.compiling():
        _raise_for(info, name, lambda k: "The algorithm failed to converge because the input matrix contained "
                   f"non-finite values or is ill-conditioned (error code: {k}).")
    return u, s, vh


def svd(A, full_matrices=False):
    """torch.linalg.svd(A, full_matrices=): (U, S descending, Vh) of every
    matrix of A [..., m, n], thin (k = min(m, n)), by one-sided Jacobi
    rotations; float32, float16 and bfloat16 (16-bit computed in float32,
    returned in A's dtype). A rank-deficient matrix's U and Vh stay
    orthonormal. full_matrices defaults to False here (torch.linalg.svd's
    default is True): full matrices of a non-square A are PyTorch's. Raises
    torch.linalg.LinAlgError, as PyTorch does, for a matrix holding a NaN
    or an infinity (the host reads the library's info). Differentiable
    (PyTorch's formula). Other inputs are PyTorch's."""
    why = svd_refused(A, full_matrices)
    if why is not None:
        _lib.pytorch_computes("svd", why)
        return _torch_svd(A, full_matrices=full_matrices)
    return torch.return_types.linalg_svd(_singular(A, True, "linalg.svd"))


def svdvals(A):
    """torch.linalg.svdvals(A): svd's singular values (the vectors are
    computed only where a gradient needs them)."""
    grad = A.requires_grad if isinstance(A, torch.Tensor) else False
    why = svd_refused(A, False, grad)
    if why is not None:
        _lib.pytorch_computes("svdvals", why)
        return _torch_svdvals(A)
    return _singular(A, grad, "linalg.svd")[1]
