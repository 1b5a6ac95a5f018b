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


class _Desc:
    """An mc_tensor of its own (not one of the package's per-thread slots),
    passed to ctypes as its address."""

    def __init__(self, t, device_type):
        self.buf = ctypes.create_string_buffer(_lib.SLOT_BYTES)
        self._as_parameter_ = ctypes.addressof(self.buf)
        _lib.pack_into(self.buf, 0, self._as_parameter_, t)
        self.contents = _lib.Tensor.from_buffer(self.buf)  # its fields, as for a ctypes pointer
        if device_type is not None:
            self.contents.device_type = device_type


def desc(t, device_type=None):
    """An mc_tensor for t, optionally with another device type."""
    return None if t is None else _Desc(t, device_type)


def stream():
    return torch.cuda.current_stream().cuda_stream


def call(name, *args):
    """mc_<name>'s status (tensors become descriptors)."""
    conv = [desc(a) if isinstance(a, torch.Tensor) else a for a in args]
    return getattr(LIB, "mc_" + name)(*conv)


def check(name, *args):
    _lib.check(call(name, *args))


def workspace(kind, x):
    n = ctypes.c_int64()
    check(kind + "_bwd_workspace_size", x, ctypes.addressof(n))
    return torch.empty(n.value, dtype=torch.uint8, device=x.device)
