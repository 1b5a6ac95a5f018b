"""Patching torch.nn.functional (and torch.linalg.qr) with metalcore, and
putting the originals back."""
import contextlib

import torch
import torch.nn.functional as F

from . import _ops, linalg

# Measured faster than PyTorch's own on that device (bench/cpu.md against
# Debian's PyTorch 1.13; bench/cuda.md against PyTorch 2.11 on an H100).
DEFAULTS = {
    "cpu": {"rms_norm", "layer_norm", "softmax", "gelu", "silu", "qr"},
    "cuda": {"rms_norm", "softmax"},
}
ALL = {"rms_norm", "layer_norm", "softmax", "gelu", "silu", "qr"}

_originals = {}
_enabled = {}  # op -> set of device types


def _rms_norm(orig):
    def rms_norm(input, normalized_shape, weight=None, eps=None):
        shape = tuple(normalized_shape) if not isinstance(normalized_shape, int) else (normalized_shape,)
        if (_on("rms_norm", input) and len(shape) == 1 and input.dim() >= 1 and shape[0] == input.shape[-1] and
                _ops.supported(input, weight)):
            return _ops.rms_norm_unchecked(input, weight, torch.finfo(input.dtype).eps if eps is None else eps)
        return orig(input, normalized_shape, weight, eps)
    return rms_norm


def _layer_norm(orig):
    def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
        shape = tuple(normalized_shape) if not isinstance(normalized_shape, int) else (normalized_shape,)
        if (_on("layer_norm", input) and len(shape) == 1 and input.dim() >= 1 and shape[0] == input.shape[-1] and
                _ops.supported(input, weight, bias)):
            return _ops.layer_norm_unchecked(input, weight, bias, eps)
        return orig(input, normalized_shape, weight, bias, eps)
    return layer_norm


def _softmax(orig):
    def softmax(input, dim=None, _stacklevel=3, dtype=None):
        if (_on("softmax", input) and dtype is None and dim is not None and input.dim() >= 1 and
                dim in (-1, input.dim() - 1) and _ops.supported(input)):
            return _ops.softmax_unchecked(input)
        return orig(input, dim, _stacklevel, dtype)
    return softmax


def _gelu(orig):
    def gelu(input, approximate="none"):
        if _on("gelu", input) and approximate in ("none", "tanh") and _ops.supported(input):
            return _ops.gelu_unchecked(input, approximate)
        return orig(input, approximate=approximate) if approximate != "none" else orig(input)
    return gelu


def _silu(orig):
    def silu(input, inplace=False):
        if _on("silu", input) and not inplace and _ops.supported(input):
            return _ops.silu_unchecked(input)
        return orig(input, inplace=inplace)
    return silu


def _qr(orig):
    def qr(A, mode="reduced", *, out=None):
        if _on("qr", A) and out is None and linalg.takes(A, mode):
            return torch.return_types.linalg_qr(linalg.qr_unchecked(A, mode))
        if out is not None:
            return orig(A, mode, out=out)
        return orig(A, mode)
    return qr


_WRAPPERS = {"rms_norm": _rms_norm, "layer_norm": _layer_norm, "softmax": _softmax, "gelu": _gelu, "silu": _silu,
             "qr": _qr}
# where each patched function lives
_MODULES = {"qr": torch.linalg}


def _on(op, t):
    return isinstance(t, torch.Tensor) and t.device.type in _enabled.get(op, ())


def enable_pytorch_overrides(ops=None):
    """Patches torch.nn.functional's functions with metalcore's. ops: names
    from ALL (on every device), or None for DEFAULTS. Idempotent."""
    for op in ALL:
        if ops is None:
            devices = {d for d, names in DEFAULTS.items() if op in names}
        else:
            devices = {"cpu", "cuda"} if op in ops else set()
        module = _MODULES.get(op, F)
        if not devices or not hasattr(module, op):  # e.g. F.rms_norm before PyTorch 2.4
            continue
        _enabled[op] = devices
        if op not in _originals:
            _originals[op] = getattr(module, op)
            setattr(module, op, _WRAPPERS[op](_originals[op]))


def disable_pytorch_overrides():
    """Puts back the exact original functions."""
    for op, orig in _originals.items():
        setattr(_MODULES.get(op, F), op, orig)
    _originals.clear()
    _enabled.clear()


@contextlib.contextmanager
def pytorch_overrides(ops=None):
    """with metalcore.pytorch_overrides(): ... — enabled inside, restored after."""
    enable_pytorch_overrides(ops)
    try:
        yield
    finally:
        disable_pytorch_overrides()
