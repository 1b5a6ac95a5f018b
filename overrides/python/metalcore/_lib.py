"""Loading libmetalcore and describing torch tensors to it (ctypes)."""
import collections
import ctypes
import functools
import logging
import os
import pathlib
import sys
import warnings

import torch

from . import _mps

# The library version this package is written for (MC_VERSION_MAJOR, and the
# MC_VERSION_MINOR that added the last function it calls): a library of
# another major, or an older minor, is refused.
ABI_MAJOR, ABI_MINOR = 0, 4

log = logging.getLogger("metalcore")
if os.environ.get("METALCORE_LOG", "").lower() == "debug":
    log.setLevel(logging.DEBUG)
    if not log.handlers:
        log.addHandler(logging.StreamHandler())

_HERE = pathlib.Path(__file__).resolve().parent
_NAME = "libmetalcore.dylib" if sys.platform == "darwin" else "libmetalcore.so"
_REPO_BUILD = _HERE.parents[2] / "build" / _NAME


def _find():
    """The library: METALCORE_LIBRARY when set (an ImportError naming it when
    it is missing or not loadable), else the copy bundled with the package
    (make python), else the repository's build/ (a source checkout)."""
    env = os.environ.get("METALCORE_LIBRARY")
    if env:
        try:
            return ctypes.CDLL(env)
        except OSError as e:
            raise ImportError(f"metalcore: METALCORE_LIBRARY={env} cannot be loaded: {e}") from None
    tried = []
    for path in (_HERE / _NAME, _REPO_BUILD):
        tried.append(str(path))
        if path.is_file():
            try:
                return ctypes.CDLL(str(path))
            except OSError as e:
                tried[-1] += f" ({e})"
    raise ImportError(f"metalcore: {_NAME} not found or not loadable; looked at: " + ", ".join(tried) +
                      ". Build it with `make` in the metalcore repository, or set METALCORE_LIBRARY.")


lib = _find()
path = lib._name
lib.mc_version.restype = ctypes.c_int32
_major, _minor = lib.mc_version() // 10000, lib.mc_version() // 100 % 100
if _major != ABI_MAJOR or _minor < ABI_MINOR:
    raise ImportError(f"metalcore: {path} is version {_major}.{_minor}.{lib.mc_version() % 100}, but this package "
                      f"is written for version {ABI_MAJOR}.{ABI_MINOR} or a later {ABI_MAJOR}.x")


class Tensor(ctypes.Structure):
    """mc_tensor (= DLTensor)."""
    _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32),
                ("ndim", ctypes.c_int32), ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                ("lanes", ctypes.c_uint16), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


DTYPES = {torch.float32: (2, 32), torch.float16: (2, 16), torch.bfloat16: (4, 16), torch.uint8: (1, 8)}
DEVICES = {"cpu": 1, "cuda": 2, "mps": 8}


_ARRAYS = [ctypes.c_int64 * n for n in range(1, 33)]  # building array types per call is slow


def describe(t):
    """A reference to an mc_tensor for t (None for None); keeps its arrays alive."""
    if t is None:
        return None
    code, bits = DTYPES[t.dtype]
    arr = _ARRAYS[max(t.dim(), 1) - 1]
    shape = arr(*t.shape)
    strides = None if t.is_contiguous() else arr(*t.stride())  # NULL: row-major contiguous
    data, offset = (_mps.buffer_and_offset(t) if t.device.type == "mps" else (t.data_ptr(), 0))
    d = Tensor(data, DEVICES[t.device.type], t.device.index or 0, t.dim(), code, bits, 1, shape, strides, offset)
    d._keep = (shape, strides)
    return ctypes.byref(d)


def encoder(t):
    """The queue to encode on: the tensor's device's current stream, or NULL on the CPU."""
    if t.is_cuda:
        return ctypes.c_void_p(torch.cuda.current_stream(t.device).cuda_stream)
    if t.device.type == "mps":  # PyTorch's current compute encoder (see _mps)
        return ctypes.c_void_p(_mps_route()[0].encoder())
    return None


class MetalcoreError(RuntimeError):
    """A call metalcore refused; the message is its own, status its mc_status."""

    def __init__(self, message, status=None):
        super().__init__(message)
        self.status = status

    def __reduce__(self):  # picklable (multiprocessing, deepcopy) with its status
        return (MetalcoreError, (str(self), self.status))


# Every function of the header, typed: (restype, argtypes).
_P, _I32, _I64, _F = ctypes.c_void_p, ctypes.c_int32, ctypes.c_int64, ctypes.c_float
_T = ctypes.POINTER(Tensor)
_TL = ctypes.POINTER(_T)
_SIGNATURES = {
    "mc_version": (_I32, []), "mc_version_string": (ctypes.c_char_p, []),
    "mc_backend_available": (_I32, [_I32]), "mc_last_error": (ctypes.c_char_p, []),
    "mc_rmsnorm_fwd": (_I32, [_T, _T, _F, _T, _T, _P]),
    "mc_rmsnorm_bwd_workspace_size": (_I32, [_T, ctypes.POINTER(_I64)]),
    "mc_rmsnorm_bwd": (_I32, [_T, _T, _T, _T, _T, _T, _T, _P]),
    "mc_fused_add_rmsnorm_fwd": (_I32, [_T, _T, _T, _F, _T, _T, _T, _P]),
    "mc_layernorm_fwd": (_I32, [_T, _T, _T, _F, _T, _T, _T, _P]),
    "mc_layernorm_bwd_workspace_size": (_I32, [_T, ctypes.POINTER(_I64)]),
    "mc_layernorm_bwd": (_I32, [_T, _T, _T, _T, _T, _T, _T, _T, _T, _P]),
    "mc_softmax_fwd": (_I32, [_T, _T, _P]), "mc_softmax_bwd": (_I32, [_T, _T, _T, _P]),
    "mc_gelu_fwd": (_I32, [_T, _I32, _T, _P]), "mc_gelu_bwd": (_I32, [_T, _T, _I32, _T, _P]),
    "mc_silu_fwd": (_I32, [_T, _T, _P]), "mc_silu_bwd": (_I32, [_T, _T, _T, _P]),
    "mc_adamw_step": (_I32, [_P, _I64, _TL, _TL, _TL, _TL, _TL, _P]),
    "mc_adamw_step_scaled": (_I32, [_P, _I64, _TL, _TL, _TL, _TL, _TL, _T, _T, _P]),
    "mc_adamw_step_capturable": (_I32, [_P, _I64, _TL, _TL, _TL, _TL, _TL, _T, _T, _T, _T, _P]),
    "mc_qr_workspace_size": (_I32, [_T, _I32, ctypes.POINTER(_I64)]),
    "mc_qr": (_I32, [_T, _I32, _T, _T, _T, _P]),
    "mc_cuda_prepare": (_I32, [_I32]),
    "mc_metal_prepare": (_I32, [ctypes.c_void_p]),
    "mc_cpu_threads": (_I32, []), "mc_set_cpu_threads": (_I32, [_I32]), "mc_cpu_isa": (ctypes.c_char_p, []),
}
for _name, (_res, _args) in _SIGNATURES.items():
    _fn = getattr(lib, _name)
    _fn.restype, _fn.argtypes = _res, _args

# A process forked after the library was loaded cannot use it (the Go
# runtime inside does not survive fork; every call there fails with
# MC_ERR_BACKEND): the child computes with PyTorch's own ops instead.
_forked = False


def _in_child():
    global _forked
    _forked = True


os.register_at_fork(after_in_child=_in_child)


def forked():
    """Whether this is a child forked after metalcore was loaded."""
    return _forked


# library calls made, by function (mc_ name without the prefix)
CALLS = collections.Counter()


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
    CALLS[name] += 1
    check(getattr(lib, "mc_" + name)(*conv))


@functools.lru_cache(maxsize=None)
def check(status):
    """Raises MetalcoreError for a non-OK status (the fast path of call())."""
    if status != 0:
        raise MetalcoreError(lib.mc_last_error().decode(), status)


def available(device_type):
    """Whether metalcore has a backend for this torch device type (none in a
    forked child, which says so once)."""
    if _forked:
        _warn_forked()
        return False
    return _backend(device_type)


# torch.compile takes the answer as a constant instead of tracing ctypes
_constant = getattr(getattr(torch, "compiler", None), "assume_constant_result", lambda f: f)


@_constant
def _backend(device_type):
    if device_type == "mps":
        route, why = _mps_route()
        if route is None:
            _mps.warn_unavailable(why)
        return route is not None
    return device_type in DEVICES and bool(lib.mc_backend_available(DEVICES[device_type]))


def _mps_route():
    return _mps.probe(bool(lib.mc_backend_available(DEVICES["mps"])))


@functools.lru_cache(maxsize=None)
def _warn_forked():
    warnings.warn("metalcore: this process was forked after metalcore was loaded, and metalcore cannot run in "
                  "such a child (the Go runtime inside it does not survive fork); PyTorch's own ops are used "
                  "here instead. Use the spawn or forkserver start method to run metalcore in workers.",
                  RuntimeWarning, stacklevel=3)
