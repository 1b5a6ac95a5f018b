"""metalcore for PyTorch: fused kernels through ctypes, and optional
overrides of torch.nn.functional.

    import metalcore
    y = metalcore.rms_norm(x, weight)
    with metalcore.pytorch_overrides():
        model(x)
"""
from . import _lib, _ops, functional, linalg, losses, nn, optim
from .patching import patch_model, unpatch_model
from ._lib import MetalcoreError, MetalcoreMemoryError, available, lib
from ._warn import warn as _warn
from .functional import fused_add_rms_norm, geglu, gelu, layer_norm, rms_norm, rope, silu, softmax, swiglu
from .losses import cross_entropy, linear_cross_entropy
from ._overrides import (ALL, DEFAULTS, active_overrides, disable_pytorch_overrides, enable_pytorch_overrides,
                         fallback_counts, pytorch_overrides, reset_fallback_counts)

__version__ = lib.mc_version_string().decode()


def backends():
    """The device types this machine can run metalcore on."""
    return [d for d in ("cpu", "cuda") if available(d)] + (["mps"] if _lib._mps_route()[0] else [])


def call_counts():
    """How many times each library function ran (mc_ name without the
    prefix -> calls), since load or reset_call_counts()."""
    return dict(_lib.CALLS)


def reset_call_counts():
    _lib.CALLS.clear()


def cpu_threads():
    """Threads one CPU call may use (MC_NUM_THREADS at load, else all cores)."""
    return int(_lib.lib.mc_cpu_threads())


MAX_CPU_THREADS = 4096  # MC_MAX_CPU_THREADS


def set_cpu_threads(n):
    """Changes the CPU thread count for later calls (n >= 1; above
    MAX_CPU_THREADS it is clamped, with a warning)."""
    n = max(int(n), -2 ** 31)  # below 1 the library refuses it, saying so
    if n > MAX_CPU_THREADS:
        _warn(f"metalcore.set_cpu_threads: {n} threads clamped to {MAX_CPU_THREADS}", RuntimeWarning)
        n = MAX_CPU_THREADS
    _lib.check(_lib.lib.mc_set_cpu_threads(n))


def info():
    """What metalcore is and does here: version, library path, each backend
    (available, or why not), the CPU instruction set and threads, whether the
    ops are registered with torch.library, and what is patched now."""
    why = {}
    for device, code in _lib.DEVICES.items():
        if device == "mps":  # PyTorch's MPS stream: the library's Metal backend and libtorch's symbols
            route, reason = _lib._mps_route()
            why[device] = "available" if route else "unavailable: " + reason
        elif available(device):
            why[device] = "available"
        elif _lib.forked():
            why[device] = "unavailable: this process was forked after metalcore was loaded"
        elif device == "cuda":
            _lib.lib.mc_cuda_prepare(0)  # unavailable: fails at once, saying why
            why[device] = "unavailable: " + _lib.lib.mc_last_error().decode()
        else:
            why[device] = "unavailable"
    return {"version": __version__, "library": _lib.path, "backends": why,
            "cpu_isa": _lib.lib.mc_cpu_isa().decode(), "cpu_threads": cpu_threads(),
            "custom_ops": _ops.CUSTOM_OPS, "overrides": active_overrides()}


__all__ = ["ALL", "DEFAULTS", "MAX_CPU_THREADS", "MetalcoreError", "MetalcoreMemoryError", "functional", "active_overrides", "backends", "call_counts", "cpu_threads",
           "fallback_counts", "patch_model", "unpatch_model",
           "info", "reset_call_counts", "reset_fallback_counts", "set_cpu_threads", "disable_pytorch_overrides",
           "enable_pytorch_overrides", "cross_entropy", "fused_add_rms_norm", "geglu", "linear_cross_entropy", "rope", "swiglu", "gelu", "layer_norm", "linalg", "nn", "optim",
           "pytorch_overrides", "rms_norm", "silu", "softmax"]
