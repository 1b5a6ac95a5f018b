"""metalcore for PyTorch: fused kernels through ctypes, and optional
overrides of torch.nn.functional.

    import metalcore
    y = metalcore.rms_norm(x, weight)
    with metalcore.pytorch_overrides():
        model(x)
"""
from . import linalg, nn, optim
from ._lib import MetalcoreError, available, lib
from ._ops import fused_add_rms_norm, gelu, layer_norm, rms_norm, silu, softmax
from ._overrides import (ALL, DEFAULTS, active_overrides, disable_pytorch_overrides, enable_pytorch_overrides,
                         pytorch_overrides)

__version__ = lib.mc_version_string().decode()


def backends():
    """The device types this machine can run metalcore on."""
    return [d for d in ("cpu", "cuda") if available(d)]


__all__ = ["ALL", "DEFAULTS", "MetalcoreError", "active_overrides", "backends", "disable_pytorch_overrides",
           "enable_pytorch_overrides", "fused_add_rms_norm", "gelu", "layer_norm", "linalg", "nn", "optim",
           "pytorch_overrides", "rms_norm", "silu", "softmax"]
