"""Patching torch.nn.functional (and torch.linalg.qr) with metalcore, and
putting the originals back."""
import collections
import contextlib
import threading

import torch
import torch.nn.functional as F

from . import _ops, linalg
from ._lib import log

# Measured faster than PyTorch's own on that device (bench/cpu.md against
# Debian's PyTorch 1.13; bench/cuda.md against PyTorch 2.11 on an H100).
DEFAULTS = {
    "cpu": {"rms_norm", "layer_norm", "softmax", "gelu", "silu", "qr"},
    "cuda": {"rms_norm", "softmax"},
}
ALL = {"rms_norm", "layer_norm", "softmax", "gelu", "silu", "qr"}

# Surprising reasons to fall back (the op takes this dtype, but not this
# call): logged once at INFO; every fallback is counted and logged at DEBUG.
_SURPRISING = {"non-contiguous", "mixed dtypes", "mixed devices"}
_counts = collections.Counter()  # (op, reason) -> calls
_told = set()


def _fell_back(op, reason):
    if _nested():
        return  # counted by the patched function whose fallback this is
    _counts[(op, reason)] += 1
    log.debug("%s falls back to PyTorch: %s", op, reason)
    if reason in _SURPRISING and (op, reason) not in _told:
        _told.add((op, reason))
        log.info("%s falls back to PyTorch's own for %s inputs (counted in metalcore.fallback_counts())", op, reason)


# A fallback's original may call another patched function (F.softmax calls
# Tensor.softmax): inside it, the patched functions go straight to theirs.
_inside = threading.local()


def _fall_back(op, why, original, *args, **kwargs):
    _fell_back(op, why)
    _inside.depth = getattr(_inside, "depth", 0) + 1
    try:
        return original(*args, **kwargs)
    finally:
        _inside.depth -= 1


def _nested():
    return getattr(_inside, "depth", 0) > 0


def fallback_counts():
    """Calls of each patched function that went to PyTorch's own, by reason:
    {op: {reason: count}}."""
    out = {}
    for (op, reason), n in sorted(_counts.items()):
        out.setdefault(op, {})[reason] = n
    return out


def reset_fallback_counts():
    _counts.clear()


def _off(op, t):
    """Why the override of op does not apply to t's device, or None."""
    if _nested():
        return "inside a fallback"
    if not isinstance(t, torch.Tensor):
        return "not a tensor"
    if t.device.type not in _enabled.get(op, ()):
        return f"not enabled for {t.device.type}"
    return None


def _last_dim(input, normalized_shape):
    shape = tuple(normalized_shape) if not isinstance(normalized_shape, int) else (normalized_shape,)
    if input.dim() >= 1 and len(shape) == 1 and shape[0] == input.shape[-1]:
        return None
    return "normalized over more than the last dimension"


def _rms_norm(orig):
    def rms_norm(input, normalized_shape, weight=None, eps=None):
        why = _off("rms_norm", input) or _last_dim(input, normalized_shape) or _ops.unsupported(input, weight)
        if why is None:
            return _ops.rms_norm_unchecked(input, weight, torch.finfo(input.dtype).eps if eps is None else eps)
        return _fall_back("rms_norm", why, orig, input, normalized_shape, weight, eps)
    return rms_norm


def _layer_norm(orig):
    def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
        why = _off("layer_norm", input) or _last_dim(input, normalized_shape) or _ops.unsupported(input, weight, bias)
        if why is None:
            return _ops.layer_norm_unchecked(input, weight, bias, eps)
        return _fall_back("layer_norm", why, orig, input, normalized_shape, weight, bias, eps)
    return layer_norm


def _softmax_why(input, dim, dtype):
    """Why a softmax call is not metalcore's, or None: a dtype= other than
    the input's, or another dim."""
    why = _off("softmax", input) or _ops.unsupported(input)
    if why is None and dtype is not None and dtype != input.dtype and not _ops.upcasts(input, dtype):
        why = f"dtype={str(dtype)[6:]} on {str(input.dtype)[6:]} input"
    if why is None and (dim is None or dim not in (-1, input.dim() - 1)):
        why = "dim other than the last"
    return why


def _softmax(orig):
    def softmax(input, dim=None, _stacklevel=3, dtype=None):
        why = _softmax_why(input, dim, dtype)
        if why is None:
            return _ops.softmax_unchecked(input, _ops.upcasts(input, dtype))
        return _fall_back("softmax", why, orig, input, dim, _stacklevel, dtype)
    return softmax


def _torch_softmax(orig):
    """torch.softmax and Tensor.softmax: (input, dim, dtype=None)."""
    def softmax(input, dim, dtype=None):
        why = _softmax_why(input, dim, dtype)
        if why is None:
            return _ops.softmax_unchecked(input, _ops.upcasts(input, dtype))
        return _fall_back("softmax", why, orig, input, dim, dtype=dtype)
    return softmax


def _gelu(orig):
    def gelu(input, approximate="none"):
        why = _off("gelu", input) or _ops.unsupported(input)
        if why is None and approximate not in ("none", "tanh"):
            why = f"approximate={approximate!r}"
        if why is None:
            return _ops.gelu_unchecked(input, approximate)
        if approximate != "none":
            return _fall_back("gelu", why, orig, input, approximate=approximate)
        return _fall_back("gelu", why, orig, input)
    return gelu


def _silu(orig):
    def silu(input, inplace=False):
        why = _off("silu", input) or ("inplace=True" if inplace else None) or _ops.unsupported(input)
        if why is None:
            return _ops.silu_unchecked(input)
        return _fall_back("silu", why, orig, input, inplace=inplace)
    return silu


def _qr(orig):
    def qr(A, mode="reduced", *, out=None):
        why = _off("qr", A) or ("out=" if out is not None else None) or linalg.why_not(A, mode)
        if why is None:
            return torch.return_types.linalg_qr(linalg.qr_unchecked(A, mode))
        if out is not None:
            return _fall_back("qr", why, orig, A, mode, out=out)
        return _fall_back("qr", why, orig, A, mode)
    return qr


# What each op patches: target name -> (op, owner, attribute, wrapper factory)
_TARGETS = {
    "rms_norm": ("rms_norm", F, "rms_norm", _rms_norm), "layer_norm": ("layer_norm", F, "layer_norm", _layer_norm),
    "softmax": ("softmax", F, "softmax", _softmax), "torch_softmax": ("softmax", torch, "softmax", _torch_softmax),
    "tensor_softmax": ("softmax", torch.Tensor, "softmax", _torch_softmax), "gelu": ("gelu", F, "gelu", _gelu),
    "silu": ("silu", F, "silu", _silu), "qr": ("qr", torch.linalg, "qr", _qr),
}


def _patched(target, original):
    """The function installed for target: made once, at import, around
    PyTorch's original, and kept. It is a module-level function here, so it
    pickles by reference (a module that stored it, as TransformerEncoderLayer
    stores its activation, stays picklable after the overrides are turned
    off), and TorchScript sees the original: the same builtin op where the
    original is one, else the original's source (torch.jit.script's rule for
    script-if-tracing wrappers)."""
    fn = _TARGETS[target][3](lambda *args, **kwargs: _ORIGINALS[target](*args, **kwargs))
    fn.__qualname__ = "patched_" + target  # what pickle looks up
    fn.__name__ = getattr(original, "__name__", target)  # what TorchScript names the original's compiled source
    fn.__module__ = __name__
    fn.__wrapped__ = original
    builtin = torch.jit._builtins._find_builtin(original)
    if builtin is not None:
        torch.jit._builtins._register_builtin(fn, builtin)
    else:
        fn.__script_if_tracing_wrapper = True
        fn.__original_fn = original
    globals()[fn.__qualname__] = fn
    return fn


# PyTorch's originals and their replacements, for what this PyTorch has
# (F.rms_norm only from 2.4 on).
_ORIGINALS = {t: getattr(owner, attr) for t, (_, owner, attr, _f) in _TARGETS.items() if hasattr(owner, attr)}
_PATCHES = {t: _patched(t, orig) for t, orig in _ORIGINALS.items()}

_enabled = {}  # op -> the device types it is on for


def _apply(enabled):
    """Makes the overrides exactly `enabled` (op -> device types): patched
    where on, and elsewhere the exact function that was there when the op
    was last turned on (PyTorch's, or whatever else had patched it)."""
    for target, patch in _PATCHES.items():
        op, owner, attr, _ = _TARGETS[target]
        on = bool(enabled.get(op))
        current = getattr(owner, attr)
        if on and current is not patch:
            _ORIGINALS[target] = current
            if hasattr(patch, "__original_fn"):
                patch.__original_fn = current
        if on:
            setattr(owner, attr, patch)
        elif current is patch:
            setattr(owner, attr, _ORIGINALS[target])
    _enabled.clear()
    _enabled.update({op: set(d) for op, d in enabled.items() if d and any(_TARGETS[t][0] == op for t in _PATCHES)})


def _selection(ops):
    if ops is None:
        return {op: {d for d, names in DEFAULTS.items() if op in names} for op in ALL}
    unknown = set(ops) - ALL
    if unknown:
        raise ValueError(f"metalcore: unknown ops {sorted(unknown)}; known: {sorted(ALL)}")
    return {op: {"cpu", "cuda"} for op in ops}


def enable_pytorch_overrides(ops=None):
    """Makes the overrides exactly ops: names from ALL (on every device), or
    None for DEFAULTS. Ops not named go back to PyTorch's originals, so
    enable(['gelu']) then enable(['silu']) leaves only silu on. Idempotent."""
    _apply(_selection(ops))


def disable_pytorch_overrides():
    """Puts back the exact original functions."""
    _apply({})


def active_overrides():
    """What is patched now: op -> the device types it is on for."""
    return {op: sorted(d) for op, d in _enabled.items()}


@contextlib.contextmanager
def pytorch_overrides(ops=None):
    """with metalcore.pytorch_overrides(ops): ... — exactly ops inside; on
    exit the overrides are what they were before (blocks nest, and an
    enable_pytorch_overrides() outside them stays)."""
    before = {op: set(d) for op, d in _enabled.items()}
    _apply(_selection(ops))
    try:
        yield
    finally:
        _apply(before)
