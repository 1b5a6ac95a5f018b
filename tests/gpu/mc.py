"""Minimal ctypes binding of libmetalcore for the GPU tests and benchmarks."""
import ctypes
import os

import torch

LIB = ctypes.CDLL(os.environ.get("METALCORE_LIBRARY", "build/libmetalcore.so"))
LIB.mc_last_error.restype = ctypes.c_char_p
LIB.mc_version_string.restype = ctypes.c_char_p


class Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32),
                ("ndim", ctypes.c_int32), ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                ("lanes", ctypes.c_uint16), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


DTYPES = {torch.float32: (2, 32), torch.float16: (2, 16), torch.bfloat16: (4, 16), torch.float64: (2, 64),
          torch.uint8: (1, 8)}


def desc(t, device_type=None, data=None):
    """An mc_tensor describing torch tensor t (kept alive by the result)."""
    if t is None:
        return None
    code, bits = DTYPES[t.dtype]
    shape = (ctypes.c_int64 * max(t.dim(), 1))(*t.shape)
    strides = (ctypes.c_int64 * max(t.dim(), 1))(*t.stride())
    d = Tensor(data if data is not None else t.data_ptr(),
               device_type or (2 if t.is_cuda else 1), t.device.index or 0, t.dim(), code, bits, 1, shape, strides, 0)
    d._keep = (shape, strides, t)
    return ctypes.pointer(d)


def stream():
    return ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)


def call(name, *args):
    """Calls mc_<name>; tensors become descriptors, floats c_float, ints int32."""
    conv = []
    for a in args:
        if isinstance(a, torch.Tensor):
            conv.append(desc(a))
        elif isinstance(a, float):
            conv.append(ctypes.c_float(a))
        elif isinstance(a, int):
            conv.append(ctypes.c_int32(a))
        else:
            conv.append(a)
    return getattr(LIB, "mc_" + name)(*conv)


def check(name, *args):
    st = call(name, *args)
    if st != 0:
        raise RuntimeError(f"mc_{name}: status {st}: {LIB.mc_last_error().decode()}")


def workspace(kind, x):
    n = ctypes.c_int64()
    check(kind + "_bwd_workspace_size", x, ctypes.byref(n))
    return torch.empty(n.value, dtype=torch.uint8, device=x.device)
