"""Layer 4: patching torch.nn.functional (and torch.linalg's qr, cholesky
and cholesky_ex) with
metalcore, and putting the originals back. A patched function computes
with metalcore wherever the library takes the call and falls back to the
function it replaced everywhere else, so it never raises where PyTorch
computes."""
import contextlib
import threading

import torch
import torch.nn.functional as F

from . import _lib, _ops, linalg
from .functional import (admit_gelu, admit_norm, admit_softmax, default_eps, forms_misfit, last_dim_only, normalized,
                         upcasts)

# Where each op is on by default: a device type (every dtype) or
# "device/dtype". Chosen through the public API against PyTorch at equal
# threads, where metalcore is faster forward and forward + backward
# (bench/overrides_cpu.md on the CPU, and QR, bench/qr.md; bench/python_ops.md
# on CUDA; the rest of linalg, bench/linalg.md). On the CPU that depends on
# the PyTorch: with 2.x's own bfloat16 LayerNorm and SiLU, forward +
# backward, PyTorch is the faster, with 1.13's metalcore; GELU stays
# PyTorch's on both (on 1.13 metalcore's lead is within the host's spread).
_PYTORCH_1 = torch.__version__.split(".")[0] == "1"
DEFAULTS = {
    "cpu": {"qr", "cholesky", "solve", "eigh", "svd"},
    "cpu/float32": {"rms_norm"},
    "cpu/bfloat16": {"rms_norm"} | ({"layer_norm", "silu"} if _PYTORCH_1 else set()),
    "cuda": {"rms_norm", "softmax", "cholesky", "solve", "eigh", "svd"},
}
ALL = {"rms_norm", "layer_norm", "softmax", "gelu", "silu", "qr", "cholesky", "solve", "eigh", "svd"}

# The targets whose fallback is running on this thread. A fallback's
# function may call another patched function (F.softmax calls
# Tensor.softmax): inside it, the patched functions go straight to theirs,
# uncounted. One that is re-entered through its own fallback (another
# library's wrapper of it, taken for the original) goes to PyTorch's.
class _Inside(threading.local):
    def __init__(self):
        self.targets = set()


_inside = _Inside()


def _fall_back(target, why, *args, **kwargs):
    running = _inside.targets
    if target in running:
        return _PYTORCH[target](*args, **kwargs)
    if not running:
        _lib.fell_back(_TARGETS[target][0], why)
    running.add(target)
    try:
        return _ORIGINALS[target](*args, **kwargs)
    finally:
        running.discard(target)


def fallback_counts():
    """Calls of each patched function that went to PyTorch's own, by reason:
    {op: {reason: count}}."""
    out = {}
    for (op, reason), n in sorted(_lib.FALLBACKS.items()):
        out.setdefault(op, {})[reason] = n
    return out


def reset_fallback_counts():
    _lib.FALLBACKS.clear()


def _off(op, t):
    """Why the override of op does not apply to t's device and dtype, or None."""
    if _inside.targets:
        return "inside a fallback"
    if not isinstance(t, torch.Tensor):
        return "not a tensor"
    answers, key = _off_answers, (op, t.is_cuda, t.is_cpu, t.dtype)  # the answers first, then _enabled (see _apply)
    try:
        return answers[key]
    except KeyError:
        pass
    places, kind = _enabled.get(op, ()), "cuda" if t.is_cuda else "cpu" if t.is_cpu else t.device.type
    why = None
    if kind not in places and f"{kind}/{str(t.dtype)[6:]}" not in places:
        why = f"not enabled for {kind} {str(t.dtype)[6:]}"
    if kind in ("cpu", "cuda"):  # (another device's type is not in the key)
        answers[key] = why
    return why


# _off's answers by (op, is_cuda, is_cpu, dtype) for the selection in force,
# so that a call PyTorch's op computes pays no string formatting. _apply
# replaces the dict after changing _enabled: an answer worked out from the
# old selection goes into the old dict.
_off_answers = {}


# Below this many bytes of input, these ops' CUDA kernels are launch-bound:
# metalcore's and PyTorch's take the same GPU time to within a couple of
# microseconds either way, while a call through this package costs several
# microseconds more host time than PyTorch's C++ op (bench/overrides_small.md).
# The overrides leave such calls to PyTorch's op, which is then never the
# slower one. Eager calls only: under torch.compile host time is the
# compiled graph's.
SMALL_CUDA_BYTES = 2 << 20


# Softmax rows on CUDA that stay PyTorch's. Rows of up to
# SHORT_KERNEL_ROW_BYTES run metalcore's short-rows kernels (several rows a
# warp): its forward and backward together are the faster there, its
# forward alone up to FAST_SHORT_ROW_BYTES, so longer ones stay PyTorch's
# where no gradient is wanted. Longer rows take metalcore's kernels of a
# block a row, slower than PyTorch's forward on short rows: rows shorter
# than SHORT_CUDA_SOFTMAX_ROW stay PyTorch's where no gradient is wanted,
# shorter than SHORTER_CUDA_SOFTMAX_ROW either way (bench/python_ops.md).
SHORT_KERNEL_ROW_BYTES, FAST_SHORT_ROW_BYTES = 512, 128
SHORT_CUDA_SOFTMAX_ROW, SHORTER_CUDA_SOFTMAX_ROW = 512, 256
SHORT_ROWS = "short CUDA rows (PyTorch's softmax is the faster there)"


def _admit_softmax(input, dim, dtype):
    """admit_softmax's answer, or why a CUDA input of short rows stays
    PyTorch's (the bounds above). Eager calls only (those admit gives
    Forms)."""
    why, forms = admit_softmax(input, dim, dtype)
    if why is None and forms is not None and input.is_cuda:
        n = input.shape[-1]
        if n < SHORT_CUDA_SOFTMAX_ROW:  # longer rows (2 bytes an element or more) are metalcore's: asked first
            row = n * input.element_size()
            if row > FAST_SHORT_ROW_BYTES and (row > SHORT_KERNEL_ROW_BYTES and n < SHORTER_CUDA_SOFTMAX_ROW or
                                               not (torch.is_grad_enabled() and input.requires_grad)):
                why = SHORT_ROWS
    return why, forms


def _off_or_small(op, t):
    """_off's answer, or why a small CUDA input stays PyTorch's
    (SMALL_CUDA_BYTES). The size of a subclass (a FakeTensor, which
    torch.compile runs the patched F.softmax on to learn its output) is not
    read: a symbolic size would be guarded on."""
    why = _off(op, t)
    if why is None and t.is_cuda and type(t) in _lib.PLAIN and not _lib.compiling() and \
            t.numel() * t.element_size() < SMALL_CUDA_BYTES:
        why = "a small CUDA input (launch-bound: PyTorch's op costs less host time)"
    return why


def _last_dim(input, normalized_shape):
    if last_dim_only(input, normalized(normalized_shape)):
        return None
    return "normalized over more than the last dimension"


def rms_norm(input, normalized_shape, weight=None, eps=None):
    eps_ = default_eps(input) if eps is None and isinstance(input, torch.Tensor) else eps
    why = _off_or_small("rms_norm", input) or _last_dim(input, normalized_shape)
    if why is None:
        why, forms = admit_norm(input, eps_, weight)
        why = why or forms_misfit(forms, input, weight)
        if why is None:
            return _ops.rms_norm(input, weight, float(eps_), forms)
    return _fall_back("rms_norm", why, input, normalized_shape, weight, eps)


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    why = _off_or_small("layer_norm", input) or _last_dim(input, normalized_shape)
    if why is None:
        why, forms = admit_norm(input, eps, weight, bias)
        why = why or forms_misfit(forms, input, weight, bias)
        if why is None:
            return _ops.layer_norm(input, weight, bias, float(eps), forms)
    return _fall_back("layer_norm", why, input, normalized_shape, weight, bias, eps)


def softmax(input, dim=None, _stacklevel=3, dtype=None):
    why = _off_or_small("softmax", input)
    if why is None:
        why, forms = _admit_softmax(input, dim, dtype)
        if why is None:
            return _ops.softmax(input, upcasts(input, dtype), forms)
    return _fall_back("softmax", why, input, dim, _stacklevel, dtype)


def _dim_softmax(target):
    """The patch of torch.softmax or Tensor.softmax, (input, dim,
    dtype=None), falling back to target's original; named target, as
    pickle finds it in this module."""
    def softmax(input, dim, dtype=None):
        why = _off_or_small("softmax", input)
        if why is None:
            why, forms = _admit_softmax(input, dim, dtype)
            if why is None:
                return _ops.softmax(input, upcasts(input, dtype), forms)
        return _fall_back(target, why, input, dim, dtype=dtype)
    softmax.__qualname__ = target
    return softmax


torch_softmax, tensor_softmax = _dim_softmax("torch_softmax"), _dim_softmax("tensor_softmax")


def gelu(input, approximate="none"):
    why = _off_or_small("gelu", input)
    if why is None:
        why, forms = admit_gelu(input, approximate)
        if why is None:
            return _ops.gelu(input, approximate == "tanh", forms)
    if approximate != "none":
        return _fall_back("gelu", why, input, approximate=approximate)
    return _fall_back("gelu", why, input)


def silu(input, inplace=False):
    why = _off_or_small("silu", input) or ("inplace=True" if inplace else None)
    if why is None:
        why, forms = _lib.admit(input)
        if why is None:
            return _ops.silu(input, forms)
    return _fall_back("silu", why, input, inplace=inplace)


def qr(A, mode="reduced", *, out=None):
    why = _off("qr", A) or ("out=" if out is not None else None) or linalg.why_not(A, mode)
    if why is None:
        return torch.return_types.linalg_qr(_ops.qr(A, mode))
    if out is not None:
        return _fall_back("qr", why, A, mode, out=out)
    return _fall_back("qr", why, A, mode)


def _cholesky_refused(A, out):
    """Why the cholesky overrides leave A to PyTorch, or None: a single
    matrix on the CPU is LAPACK's (metalcore's CPU kernel is for batches)."""
    why = _off("cholesky", A) or ("out=" if out is not None else None) or linalg.cholesky_refused(A)
    if why is None and A.is_cpu and A.numel() <= A.shape[-1] ** 2:
        why = "one matrix on the CPU"
    return why


def cholesky(A, *, upper=False, out=None):
    why = _cholesky_refused(A, out) or ("raising under torch.compile" if _lib.compiling() else None)
    if why is None:
        return linalg.factor(A, upper, "linalg.cholesky")[0]
    if out is not None:
        return _fall_back("cholesky", why, A, upper=upper, out=out)
    return _fall_back("cholesky", why, A, upper=upper)


def cholesky_ex(A, *, upper=False, check_errors=False, out=None):
    why = _cholesky_refused(A, out)
    if why is None:
        raising_as = "linalg.cholesky_ex" if check_errors else None
        return torch.return_types.linalg_cholesky_ex(linalg.factor(A, upper, raising_as))
    if out is not None:
        return _fall_back("cholesky_ex", why, A, upper=upper, check_errors=check_errors, out=out)
    return _fall_back("cholesky_ex", why, A, upper=upper, check_errors=check_errors)


def _solve_refused(A, B, left, out):
    """Why the solve overrides leave the call to PyTorch, or None: a single
    system on the CPU is LAPACK's (metalcore's CPU kernel is for batches)."""
    why = _off("solve", A) or ("out=" if out is not None else None) or linalg.solve_refused(A, B, left)
    if why is None and A.is_cpu and A.numel() <= A.shape[-1] ** 2 and B.numel() <= B.shape[-1] * A.shape[-1]:
        why = "one system on the CPU"
    return why


def solve(A, B, *, left=True, out=None):
    why = _solve_refused(A, B, left, out) or ("raising under torch.compile" if _lib.compiling() else None)
    if why is None:
        return linalg.systems(A, B, left, "torch.linalg.solve")[0]
    if out is not None:
        return _fall_back("solve", why, A, B, left=left, out=out)
    return _fall_back("solve", why, A, B, left=left)


def solve_ex(A, B, *, left=True, check_errors=False, out=None):
    why = _solve_refused(A, B, left, out)
    if why is None:
        raising_as = "torch.linalg.solve_ex" if check_errors else None
        return torch.return_types.linalg_solve_ex(linalg.systems(A, B, left, raising_as))
    if out is not None:
        return _fall_back("solve_ex", why, A, B, left=left, check_errors=check_errors, out=out)
    return _fall_back("solve_ex", why, A, B, left=left, check_errors=check_errors)


# The fewest matrices of an order that the eigh overrides compute on CUDA,
# where one warp or block a matrix must beat PyTorch's batch (bench/linalg.md,
# small batches on the H100): at order 17 to 32 cuSOLVER's batched Jacobi
# wins below about 256 matrices, and past 64 PyTorch's loop over the batch
# wins below 4. On the CPU a single matrix is LAPACK's below _CPU_SINGLE
# (where the lanes, for batches, and LAPACK's call beat the tridiagonal
# method on one matrix: parity at 32 with PyTorch 2.6), metalcore's from it
# (1.4-3x LAPACK from 48 to 128, PyTorch 1.13 and 2.6).
_CPU_SINGLE = 48


def _eigh_fewest(A):
    n = A.shape[-1]
    if A.is_cuda:
        return 256 if 16 < n <= 32 else 4 if n > 64 else 2
    return 1 if A.is_cpu and n >= _CPU_SINGLE else 2


def _eigh_refused(A, UPLO, vectors, out):
    """Why the eigh overrides leave A to PyTorch, or None: batches too small
    to be faster (_eigh_fewest); under torch.compile PyTorch's (they raise
    on the data)."""
    why = _off("eigh", A) or ("out=" if out is not None else None) or linalg.eigh_refused(A, UPLO, vectors)
    if why is None:
        n, fewest = A.shape[-1], _eigh_fewest(A)
        if A.numel() < fewest * n * n:
            why = f"fewer than {fewest} matrices of order {n}"
    return why or ("raising under torch.compile" if _lib.compiling() else None)


def eigh(A, UPLO="L", *, out=None):
    why = _eigh_refused(A, UPLO, True, out)
    if why is None:
        return linalg.eigh(A, UPLO)
    if out is not None:
        return _fall_back("eigh", why, A, UPLO, out=out)
    return _fall_back("eigh", why, A, UPLO)


def eigvalsh(A, UPLO="L", *, out=None):
    why = _eigh_refused(A, UPLO, isinstance(A, torch.Tensor) and A.requires_grad, out)
    if why is None:
        return linalg.eigvalsh(A, UPLO)
    if out is not None:
        return _fall_back("eigvalsh", why, A, UPLO, out=out)
    return _fall_back("eigvalsh", why, A, UPLO)


# The fewest matrices that the svd overrides compute: a single matrix is
# PyTorch's on CUDA, and LAPACK's on the CPU below min(m, n) = _CPU_SINGLE
# (from it, one matrix preconditioned, 1.1-4x LAPACK up to 256).
_SVD_FEWEST = 2


def _svd_refused(A, full_matrices, vectors, driver, out):
    """Why the svd overrides leave A to PyTorch, or None; under
    torch.compile PyTorch's (they raise on the data)."""
    why = (_off("svd", A) or ("out=" if out is not None else None) or (f"driver={driver!r}" if driver else None)
           or linalg.svd_refused(A, full_matrices, vectors))
    if why is None and A.numel() < _SVD_FEWEST * A.shape[-1] * A.shape[-2] and not (
            A.is_cpu and min(A.shape[-2:]) >= _CPU_SINGLE):
        why = f"fewer than {_SVD_FEWEST} matrices"
    return why or ("raising under torch.compile" if _lib.compiling() else None)


def svd(A, full_matrices=True, *, driver=None, out=None):
    why = _svd_refused(A, full_matrices, True, driver, out)
    if why is None:
        return linalg.svd(A, full_matrices)
    if out is not None:
        return _fall_back("svd", why, A, full_matrices, driver=driver, out=out)
    return _fall_back("svd", why, A, full_matrices, driver=driver)


def svdvals(A, *, driver=None, out=None):
    why = _svd_refused(A, False, isinstance(A, torch.Tensor) and A.requires_grad, driver, out)
    if why is None:
        return linalg.svdvals(A)
    if out is not None:
        return _fall_back("svdvals", why, A, driver=driver, out=out)
    return _fall_back("svdvals", why, A, driver=driver)


# What each target patches: target -> (op, owner, attribute, the patched function)
_TARGETS = {
    "rms_norm": ("rms_norm", F, "rms_norm", rms_norm), "layer_norm": ("layer_norm", F, "layer_norm", layer_norm),
    "softmax": ("softmax", F, "softmax", softmax), "torch_softmax": ("softmax", torch, "softmax", torch_softmax),
    "tensor_softmax": ("softmax", torch.Tensor, "softmax", tensor_softmax), "gelu": ("gelu", F, "gelu", gelu),
    "silu": ("silu", F, "silu", silu), "qr": ("qr", torch.linalg, "qr", qr),
    "cholesky": ("cholesky", torch.linalg, "cholesky", cholesky),
    "cholesky_ex": ("cholesky", torch.linalg, "cholesky_ex", cholesky_ex),
    "solve": ("solve", torch.linalg, "solve", solve),
    "solve_ex": ("solve", torch.linalg, "solve_ex", solve_ex),
    "eigh": ("eigh", torch.linalg, "eigh", eigh), "eigvalsh": ("eigh", torch.linalg, "eigvalsh", eigvalsh),
    "svd": ("svd", torch.linalg, "svd", svd), "svdvals": ("svd", torch.linalg, "svdvals", svdvals),
}


def _patched(target, original):
    """The function installed for target, a module-level function here (it
    pickles by reference: a module that stored it, as
    TransformerEncoderLayer stores its activation, stays picklable after the
    overrides are turned off), which TorchScript sees as the original: the
    same builtin op where the original is one, else the original's source
    (torch.jit.script's rule for script-if-tracing wrappers)."""
    fn = _TARGETS[target][3]
    fn.__name__ = getattr(original, "__name__", target)  # what TorchScript names the original's compiled source
    fn.__wrapped__ = original
    builtin = torch.jit._builtins._find_builtin(original)
    if builtin is not None:
        torch.jit._builtins._register_builtin(fn, builtin)
    else:
        fn.__script_if_tracing_wrapper = True
        fn.__original_fn = original
    return fn


# PyTorch's functions as imported (where this PyTorch has them: F.rms_norm
# only from 2.4 on), what each patched function falls back to (the function
# it replaced when last turned on), and the patched functions.
_PYTORCH = {t: getattr(owner, attr) for t, (_, owner, attr, _f) in _TARGETS.items() if hasattr(owner, attr)}
_ORIGINALS = dict(_PYTORCH)
_PATCHES = {t: _patched(t, orig) for t, orig in _PYTORCH.items()}


def _calls_patch(fn, patch):
    """Whether fn is patch or a wrapper of it (through __wrapped__)."""
    for _ in range(16):
        if fn is patch:
            return True
        fn = getattr(fn, "__wrapped__", None)
        if fn is None:
            return False
    return False


_enabled = {}  # op -> the device types it is on for


def _apply(enabled):
    """Makes the overrides exactly `enabled` (op -> device types): patched
    where on, and elsewhere the exact function that was there when the op
    was last turned on (PyTorch's, or whatever else had patched it)."""
    for target, patch in _PATCHES.items():
        op, owner, attr, _ = _TARGETS[target]
        on = bool(enabled.get(op))
        current = getattr(owner, attr)
        if on and not _calls_patch(current, patch):
            _ORIGINALS[target] = current
            if hasattr(patch, "__original_fn"):
                patch.__original_fn = current
            setattr(owner, attr, patch)
        elif not on and current is patch:
            setattr(owner, attr, _ORIGINALS[target])
    _enabled.clear()
    _enabled.update({op: set(d) for op, d in enabled.items() if d and any(_TARGETS[t][0] == op for t in _PATCHES)})
    global _off_answers
    _off_answers = {}


def _selection(ops):
    if ops is None:
        return {op: {d for d, names in DEFAULTS.items() if op in names} for op in ALL}
    unknown = set(ops) - ALL
    if unknown:
        raise ValueError(f"metalcore: unknown ops {sorted(unknown)}; known: {sorted(ALL)}")
    return {op: {"cpu", "cuda"} for op in ops}


# What enable/disable last set, and the pytorch_overrides blocks open now
# (on any thread), oldest first: the newest block's selection is in force,
# else the base. A block that ends removes its own entry, in whatever order
# blocks end.
_lock = threading.RLock()
_base = {}
_blocks = []  # [token, selection]


def _set(selection):
    """Sets the selection in force now: the newest open block's, else the
    base."""
    global _base
    with _lock:
        if _blocks:
            _blocks[-1][1] = selection
        else:
            _base = selection
        _apply(selection)


def enable_pytorch_overrides(ops=None):
    """Makes the overrides exactly ops: names from ALL (on every device), or
    None for DEFAULTS. Ops not named go back to PyTorch's originals, so
    enable(['gelu']) then enable(['silu']) leaves only silu on. Idempotent.
    Inside a pytorch_overrides block it lasts until the block ends."""
    _set(_selection(ops))


def disable_pytorch_overrides():
    """Puts back the exact original functions."""
    _set({})


def active_overrides():
    """What is patched now: op -> where it is on (device types, or
    "device/dtype")."""
    return {op: sorted(d) for op, d in _enabled.items()}


@contextlib.contextmanager
def pytorch_overrides(ops=None):
    """with metalcore.pytorch_overrides(ops): ... — exactly ops inside; on
    exit the overrides are what they were before (blocks nest). Blocks on
    several threads share the process's one set of functions: the newest
    open block's ops are on, and when every block has ended, the set
    enable_pytorch_overrides left."""
    entry = [object(), _selection(ops)]
    with _lock:
        _blocks.append(entry)
        _apply(entry[1])
    try:
        yield
    finally:
        with _lock:
            _blocks.remove(entry)
            _apply(_blocks[-1][1] if _blocks else _base)
