"""The GPU tests' and benchmarks' view of libmetalcore: the shim's own ctypes
layer (overrides/python/metalcore/_lib.py), plus descriptors that can lie
about the device (for the bad-pointer checks) and a workspace helper."""
import ctypes
import os
import pathlib
import sys

import torch

_ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(_ROOT / "overrides" / "python"))
os.environ.setdefault("METALCORE_LIBRARY", str(_ROOT / "build" / "libmetalcore.so"))

from metalcore import _lib  # noqa: E402

LIB = _lib.lib


def desc(t, device_type=None):
    """A pointer to an mc_tensor for t, optionally with another device type."""
    if t is None:
        return None
    d = _lib.describe(t)._obj
    if device_type is not None:
        d.device_type = device_type
    return ctypes.pointer(d)


def stream():
    return ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)


def call(name, *args):
    """mc_<name>'s status (tensors become descriptors, floats c_float, ints int32)."""
    try:
        _lib.call(name, *args)
        return 0
    except _lib.MetalcoreError as e:
        return e.status


def check(name, *args):
    _lib.call(name, *args)


def workspace(kind, x):
    n = ctypes.c_int64()
    check(kind + "_bwd_workspace_size", x, ctypes.byref(n))
    return torch.empty(n.value, dtype=torch.uint8, device=x.device)
