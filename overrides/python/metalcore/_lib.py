"""Loading libmetalcore and describing torch tensors to it (ctypes)."""
import ctypes
import functools
import os
import pathlib

import torch

_HERE = pathlib.Path(__file__).resolve().parent
_REPO_BUILD = _HERE.parents[2] / "build" / "libmetalcore.so"


def _find():
    tried = []
    env = os.environ.get("METALCORE_LIBRARY")
    candidates = ([pathlib.Path(env)] if env else []) + [_REPO_BUILD, _HERE / "libmetalcore.so"]
    for path in candidates:
        tried.append(str(path))
        if path.is_file():
            try:
                return ctypes.CDLL(str(path))
            except OSError as e:
                tried[-1] += f" ({e})"
    raise ImportError("metalcore: libmetalcore.so not found or not loadable; looked at: " + ", ".join(tried) +
                      ". Build it with `make` in the metalcore repository, or set METALCORE_LIBRARY.")


lib = _find()
lib.mc_last_error.restype = ctypes.c_char_p
lib.mc_version_string.restype = ctypes.c_char_p


class Tensor(ctypes.Structure):
    """mc_tensor (= DLTensor)."""
    _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32),
                ("ndim", ctypes.c_int32), ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                ("lanes", ctypes.c_uint16), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


DTYPES = {torch.float32: (2, 32), torch.float16: (2, 16), torch.bfloat16: (4, 16), torch.uint8: (1, 8)}
DEVICES = {"cpu": 1, "cuda": 2}


_ARRAYS = [ctypes.c_int64 * n for n in range(1, 33)]  # building array types per call is slow


def describe(t):
    """A reference to an mc_tensor for t (None for None); keeps its arrays alive."""
    if t is None:
        return None
    code, bits = DTYPES[t.dtype]
    arr = _ARRAYS[max(t.dim(), 1) - 1]
    shape = arr(*t.shape)
    strides = None if t.is_contiguous() else arr(*t.stride())  # NULL: row-major contiguous
    d = Tensor(t.data_ptr(), DEVICES[t.device.type], t.device.index or 0, t.dim(), code, bits, 1, shape, strides, 0)
    d._keep = (shape, strides)
    return ctypes.byref(d)


def encoder(t):
    """The queue to encode on: the tensor's device's current stream, or NULL on the CPU."""
    if t.is_cuda:
        return ctypes.c_void_p(torch.cuda.current_stream(t.device).cuda_stream)
    return None


class MetalcoreError(RuntimeError):
    """A call metalcore refused; the message is its own, status its mc_status."""

    def __init__(self, message, status):
        super().__init__(message)
        self.status = status


def call(name, *args):
    """Calls mc_<name>: tensors (or None) become descriptors, floats c_float,
    ints int32; raises MetalcoreError on a non-OK status."""
    conv = []
    for a in args:
        if a is None or isinstance(a, torch.Tensor):
            conv.append(describe(a))
        elif isinstance(a, float):
            conv.append(ctypes.c_float(a))
        elif isinstance(a, int):
            conv.append(ctypes.c_int32(a))
        else:
            conv.append(a)
    check(getattr(lib, "mc_" + name)(*conv))


@functools.lru_cache(maxsize=None)
def check(status):
    """Raises MetalcoreError for a non-OK status (the fast path of call())."""
    if status != 0:
        raise MetalcoreError(lib.mc_last_error().decode(), status)


def available(device_type):
    """Whether metalcore has a backend for this torch device type (asked once)."""
    return device_type in DEVICES and bool(lib.mc_backend_available(DEVICES[device_type]))
