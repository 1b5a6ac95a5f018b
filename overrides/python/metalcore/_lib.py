"""Layer 1: loading libmetalcore, describing torch tensors to it, and saying
whether it takes a call.

Everything a kernel call needs on the host is here, made cheap: a tensor is
described by one struct.pack_into into a per-thread slot (the mc_tensor and
its shape and strides side by side, at fixed addresses), the CUDA stream is
read as a raw handle, and every library function has fixed argtypes taking
addresses."""
import collections
import ctypes
import functools
import itertools
import logging
import math
import os
import pathlib
import struct
import sys
import threading

import torch

from . import _mps
from ._warn import warn

# The library version this package is written for (MC_VERSION_MAJOR, and the
# MC_VERSION_MINOR that added the last function it calls): a library of
# another major, or an older minor, is refused.
ABI_MAJOR, ABI_MINOR = 0, 6

log = logging.getLogger("metalcore")
if os.environ.get("METALCORE_LOG", "").lower() == "debug":
    log.setLevel(logging.DEBUG)
    if not log.handlers:
        log.addHandler(logging.StreamHandler())

_HERE = pathlib.Path(__file__).resolve().parent
_NAME = "libmetalcore.dylib" if sys.platform == "darwin" else "libmetalcore.so"
_REPO_BUILD = _HERE.parents[2] / "build" / _NAME


def _open(path):
    """The library at path, checked to be metalcore (an ImportError naming
    the file otherwise)."""
    try:
        found = ctypes.CDLL(str(path))
    except OSError as e:
        raise ImportError(f"metalcore: {path} cannot be loaded: {e}") from None
    if not hasattr(found, "mc_version"):
        raise ImportError(f"metalcore: {path} is not libmetalcore (it has no mc_version)")
    return found


def _find():
    """The library: METALCORE_LIBRARY when set, else the copy bundled with the
    package (make python), else the repository's build/ (a source checkout)."""
    env = os.environ.get("METALCORE_LIBRARY")
    if env:
        return _open(env)
    for path in (_HERE / _NAME, _REPO_BUILD):
        if path.is_file():
            return _open(path)
    raise ImportError(f"metalcore: {_NAME} not found; looked at: {_HERE / _NAME}, {_REPO_BUILD}. "
                      "Build it with `make` in the metalcore repository, or set METALCORE_LIBRARY.")


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


DTYPES = {torch.float32: (2, 32), torch.float16: (2, 16), torch.bfloat16: (4, 16), torch.uint8: (1, 8),
          torch.int64: (0, 64), torch.int32: (0, 32)}
DEVICES = {"cpu": 1, "cuda": 2, "mps": 8}
MAX_DIMS = 32  # the library's bound on ndim
FLOATS = (torch.float32, torch.float16, torch.bfloat16)

# ---- describing tensors -------------------------------------------------------------

# An mc_tensor is 48 bytes; a slot holds one and, right after it, its shape
# and strides, so one pack_into writes a whole description.
_HEAD = "<QiiiBBHQQQ"
assert ctypes.sizeof(Tensor) == struct.calcsize(_HEAD) == 48
SLOT_BYTES = 48 + 16 * MAX_DIMS
SLOT_WORDS = SLOT_BYTES // 8  # a slot in 8-byte words: its first is the data pointer
_CONTIGUOUS = [struct.Struct(_HEAD + "q" * max(n, 1)) for n in range(MAX_DIMS + 1)]
_STRIDED = [struct.Struct(_HEAD + "q" * (2 * n)) for n in range(MAX_DIMS + 1)]


class _Slots(threading.local):
    """Each thread's description slots, one per argument position of a call
    (a call runs with the GIL released, so threads cannot share them)."""

    def __init__(self):
        self.buffers = []
        self.views = []
        self.addresses = []

    def grow(self, n):
        while len(self.buffers) <= n:
            buf = ctypes.create_string_buffer(SLOT_BYTES)
            self.buffers.append(buf)
            self.views.append(memoryview(buf).cast("B"))
            self.addresses.append(ctypes.addressof(buf))


_slots = _Slots()


def pack_into(buf, offset, address, t, half=None):
    """Writes t's mc_tensor at buf[offset:] (its address is address), its
    shape and strides right after it. half 0 or 1: the first or second half
    of a contiguous float32 t instead, as a 1-D tensor at a byte offset
    (LayerNorm's mean and rstd share one allocation)."""
    if t.is_cuda:
        data, device_type, device_id, byte_offset = t.data_ptr(), 2, t.get_device(), 0
    elif t.is_mps:  # the buffer and the view's offset into it (see _mps)
        data, byte_offset = _mps.buffer_and_offset(t)
        device_type, device_id = 8, t.device.index or 0
    else:
        data, device_type, device_id, byte_offset = t.data_ptr(), 1, 0, 0
    if half is not None:
        k = t.numel() // 2
        _CONTIGUOUS[1].pack_into(buf, offset, data, device_type, device_id, 1, 2, 32, 1, address + 48, 0,
                                 byte_offset + 4 * k * half, k)
        return
    code, bits = DTYPES[t.dtype]
    n = t.dim()
    if t.is_contiguous():
        _CONTIGUOUS[n].pack_into(buf, offset, data, device_type, device_id, n, code, bits, 1, address + 48, 0,
                                 byte_offset, *(t.shape if n else (0,)))
    else:
        _STRIDED[n].pack_into(buf, offset, data, device_type, device_id, n, code, bits, 1, address + 48,
                              address + 48 + 8 * n, byte_offset, *t.shape, *t.stride())


def describe(t, slot=0):
    """The address of an mc_tensor for t in this thread's slot (None for
    None), valid until the slot is used again."""
    if t is None:
        return None
    slots = _slots
    if slot >= len(slots.buffers):
        slots.grow(slot)
    address = slots.addresses[slot]
    pack_into(slots.buffers[slot], 0, address, t)
    return address


def form(t):
    """Everything t's description holds but its data pointer (shape,
    strides, dtype, device), as a key; None for None."""
    if t is None:
        return None
    return t.shape, t.stride(), t.dtype, t.device


class _Plan:
    """The mc_tensors of one call's tensors side by side in one block, and
    which 8-byte word of it holds each one's data pointer: (word, index of
    the tensor)."""
    __slots__ = ("buffer", "words", "addresses", "slots")

    def __init__(self, tensors, halves):
        n = len(tensors)
        self.buffer = ctypes.create_string_buffer(n * SLOT_BYTES)
        self.words = memoryview(self.buffer).cast("B").cast("Q")
        base = ctypes.addressof(self.buffer)
        self.addresses = [None] * n
        slots = []
        for i, t in enumerate(tensors):
            if t is None:
                continue
            self.addresses[i] = base + i * SLOT_BYTES
            pack_into(self.buffer, i * SLOT_BYTES, self.addresses[i], t, halves.get(i) if halves else None)
            slots.append((i * SLOT_WORDS, i))
        self.slots = tuple(slots)


class _Plans(threading.local):
    def __init__(self):
        self.plans = {}
        self.fresh = None


_plans = _Plans()
_MAX_PLANS = 256


def described(key, tensors, halves=None, plans=None):
    """The addresses of mc_tensors for tensors (None stays None), in this
    thread's block for key: built on the key's first call, and after that
    only the data pointers are written. key must fix everything else of
    every tensor: the forms of the tensors the caller was given, and
    whatever fixes the shapes of the ones it made. halves: {index: 0 or 1}
    for the entries described as half 0 or 1 of a tensor (pack_into).
    plans: where the block is kept, by key (admitted tensors' Forms.plans,
    whose forms the key then need not name), else this thread's table. MPS
    tensors (a buffer and an offset, not a pointer) are described afresh
    each call."""
    if plans is None:
        plans = _plans.plans
    plan = plans.get(key)
    if plan is None:
        plan = _Plan(tensors, halves)
        if any(t is not None and t.is_mps for t in tensors):
            _plans.fresh = plan  # alive until this thread's next such call, after this call's end
        else:
            if len(plans) >= _MAX_PLANS:
                plans.clear()
            plans[key] = plan
        return plan.addresses
    words = plan.words
    for k, i in plan.slots:
        words[k] = tensors[i].data_ptr()
    return plan.addresses


_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def queue_getter(device):
    """For the Forms of device's tensors: a callable of no arguments that
    gives the queue run passes (the current stream's raw handle, or None on
    the CPU), called without a Python frame (a C partial; every Python call
    costs the eager path most of a microsecond on a slow host); None on MPS,
    whose calls go through run."""
    if device.type == "cuda":
        if _raw_stream is not None:
            return functools.partial(_raw_stream, device.index)
        return lambda: torch.cuda.current_stream(device).cuda_stream
    if device.type == "cpu":
        return _NO_QUEUE
    return None


_NO_QUEUE = itertools.repeat(None).__next__  # None, from C


def run(fn, t, *args):
    """fn(*args, queue) for t's device (the current stream's raw handle on
    CUDA, None on the CPU), raising for a status other than MC_OK (fail).
    An MPS call runs on PyTorch's stream queue with its current compute
    encoder (see _mps). (The tests inline: this is every call's path that
    has no Forms.)"""
    if t.is_cuda:
        status = fn(*args, _raw_stream(t.get_device()) if _raw_stream is not None else
                    torch.cuda.current_stream(t.device).cuda_stream)
    elif t.is_mps:
        status = _mps_route()[0].run(fn, args)
    else:
        status = fn(*args, None)
    if status:
        fail(status)


# ---- calling the library --------------------------------------------------------------

class MetalcoreError(RuntimeError):
    """A call metalcore refused; the message is its own, status its mc_status."""

    def __init__(self, message, status=None):
        super().__init__(message)
        self.status = status

    def __reduce__(self):  # picklable (multiprocessing, deepcopy) with its status
        return (MetalcoreError, (str(self), self.status))


class MetalcoreMemoryError(MetalcoreError, MemoryError):
    """The library could not allocate its working memory (MC_ERR_OUT_OF_MEMORY)."""


OUT_OF_MEMORY = 7

# Every function of the header, typed: (restype, argtypes); tensors, tensor
# lists, the config and the encoder travel as addresses.
_P, _I32, _I64, _F = ctypes.c_void_p, ctypes.c_int32, ctypes.c_int64, ctypes.c_float
_SIGNATURES = {
    "mc_version": (_I32, []), "mc_version_string": (ctypes.c_char_p, []),
    "mc_backend_available": (_I32, [_I32]), "mc_last_error": (ctypes.c_char_p, []),
    "mc_rmsnorm_fwd": (_I32, [_P, _P, _F, _P, _P, _P]),
    "mc_rmsnorm_bwd_workspace_size": (_I32, [_P, _P]),
    "mc_rmsnorm_bwd": (_I32, [_P, _P, _P, _P, _P, _P, _P, _P]),
    "mc_fused_add_rmsnorm_fwd": (_I32, [_P, _P, _P, _F, _P, _P, _P, _P]),
    "mc_layernorm_fwd": (_I32, [_P, _P, _P, _F, _P, _P, _P, _P]),
    "mc_layernorm_bwd_workspace_size": (_I32, [_P, _P]),
    "mc_layernorm_bwd": (_I32, [_P, _P, _P, _P, _P, _P, _P, _P, _P, _P]),
    "mc_softmax_fwd": (_I32, [_P, _P, _P]), "mc_softmax_bwd": (_I32, [_P, _P, _P, _P]),
    "mc_gelu_fwd": (_I32, [_P, _I32, _P, _P]), "mc_gelu_bwd": (_I32, [_P, _P, _I32, _P, _P]),
    "mc_silu_fwd": (_I32, [_P, _P, _P]), "mc_silu_bwd": (_I32, [_P, _P, _P, _P]),
    "mc_adamw_step": (_I32, [_P, _I64, _P, _P, _P, _P, _P, _P]),
    "mc_adamw_step_scaled": (_I32, [_P, _I64, _P, _P, _P, _P, _P, _P, _P, _P]),
    "mc_adamw_step_capturable": (_I32, [_P, _I64, _P, _P, _P, _P, _P, _P, _P, _P, _P, _P]),
    "mc_cross_entropy": (_I32, [_P, _P, _I64, _F, _P, _P, _P, _P]),
    "mc_cross_entropy_fwd": (_I32, [_P, _P, _I64, _F, _P, _P, _P]),
    "mc_cross_entropy_bwd": (_I32, [_P, _P, _P, _I64, _F, _P, _P, _P]),
    "mc_loss_grad_scale": (_I32, [_P, _P, _P]),
    "mc_glu_fwd": (_I32, [_P, _P, _I32, _P, _P]), "mc_glu_bwd": (_I32, [_P, _P, _P, _I32, _P, _P, _P]),
    "mc_rope": (_I32, [_P, _P, _P, _I32, _P, _P]),
    "mc_cholesky": (_I32, [_P, _I32, _P, _P, _P]),
    "mc_solve": (_I32, [_P, _P, _P, _P, _P]),
    "mc_eigh": (_I32, [_P, _I32, _P, _P, _P, _P]),
    "mc_svd": (_I32, [_P, _P, _P, _P, _P, _P]),
    "mc_qr_workspace_size": (_I32, [_P, _I32, _P]),
    "mc_qr": (_I32, [_P, _I32, _P, _P, _P, _P]),
    "mc_cuda_prepare": (_I32, [_I32]),
    "mc_metal_prepare": (_I32, [_P]),
    "mc_cpu_threads": (_I32, []), "mc_set_cpu_threads": (_I32, [_I32]), "mc_cpu_isa": (ctypes.c_char_p, []),
}
for _name, (_res, _args) in _SIGNATURES.items():
    _fn = getattr(lib, _name)
    _fn.restype, _fn.argtypes = _res, _args

# library calls made, by function (mc_ name without the prefix)
CALLS = collections.Counter()

# Calls that went to PyTorch's own op instead, by (op, reason): logged at
# DEBUG, and once at INFO where the reason is surprising (the op takes this
# dtype, but not this call).
FALLBACKS = collections.Counter()
_SURPRISING = {"non-contiguous", "mixed dtypes", "mixed devices", "data not aligned to its elements"}  # MISALIGNED
_told = set()


def fell_back(op, reason):
    FALLBACKS[(op, reason)] += 1
    log.debug("%s falls back to PyTorch: %s", op, reason)
    if reason in _SURPRISING and (op, reason) not in _told:
        _told.add((op, reason))
        log.info("%s falls back to PyTorch's own for %s inputs (counted in metalcore.fallback_counts())", op, reason)


def pytorch_computes(op, why):
    """Counts a call of op that PyTorch's own computes for why (fell_back),
    unless PyTorch must run it anyway (PYTORCH_RUNS)."""
    if why not in PYTORCH_RUNS:
        fell_back(op, why)


def fail(status):
    """Raises MetalcoreError (MetalcoreMemoryError when memory ran out) for
    a non-OK status."""
    cls = MetalcoreMemoryError if status == OUT_OF_MEMORY else MetalcoreError
    raise cls(lib.mc_last_error().decode(), status)


def check(status):
    """Raises for a non-OK status."""
    if status:
        fail(status)


# ---- fork, backends and warnings ------------------------------------------------------

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
    warn("metalcore: this process was forked after metalcore was loaded, and metalcore cannot run in "
         "such a child (the Go runtime inside it does not survive fork); PyTorch's own ops are used "
         "here instead. Use the spawn or forkserver start method to run metalcore in workers.",
         RuntimeWarning)


# ---- whether the library takes a call ----------------------------------------------

# Whether torch.compile is tracing the call (PyTorch 2.4+; the custom ops
# are then the path, and nothing may read a data pointer).
compiling = getattr(getattr(torch, "compiler", None), "is_compiling", None) if hasattr(torch.library, "custom_op") \
    else None
if compiling is None:
    def compiling():
        return False

# An ONNX export either traces (TorchScript's exporter) or compiles
# (dynamo's), so eager calls need not ask the exporter, whose question costs
# half a microsecond on PyTorch 2. (torch.jit.is_tracing, not
# torch._C._is_tracing, where torch.compile exists: it traces only the
# former; before it, the latter saves two Python calls.)
_is_tracing = torch.jit.is_tracing if hasattr(torch, "compile") else torch._C._is_tracing
_onnx_export = getattr(torch.onnx, "is_in_onnx_export", lambda: False)
_c_is_tracing = torch._C._is_tracing


# functorch's transforms (vmap, grad, ...) hand ops wrapper tensors without
# data pointers: PyTorch's op runs under them.
_transforms_active = getattr(torch._C, "_are_functorch_transforms_active", lambda: False)
TRANSFORMED = "under a functorch transform"

# The reasons recording() and a functorch transform give: PyTorch's op runs
# instead, even where a direct metalcore function would refuse the input.
PYTORCH_RUNS = ("traced", "forked child", TRANSFORMED)


def recording():
    """Why PyTorch's own op must run whatever the input: a torch.jit trace or
    an ONNX export is recording the call (a ctypes call would be invisible to
    it), or this is a forked child; else None."""
    if _is_tracing() or _onnx_export():
        return "traced"
    if _forked:
        _warn_forked()
        return "forked child"
    return None


PLAIN = (torch.Tensor, torch.nn.Parameter)
MISALIGNED = "data not aligned to its elements"


_FLOAT_SET = frozenset(FLOATS)
_available = {}  # device type -> whether metalcore has a backend (fixed for the process, bar fork)


def unsupported_one(x, data=True):
    """Why metalcore does not compute a call on x alone, or None when it
    does: a plain tensor (not a subclass), float32/float16/bfloat16, 1 to 32
    dimensions, on a device with a backend, contiguous and (unless data is
    False) aligned to its elements; and no trace recording the call."""
    if type(x) not in PLAIN:
        return "tensor subclass" if isinstance(x, torch.Tensor) else "not a tensor"
    if _forked:
        return recording()
    compiled = compiling()  # asked once: it is a Python call on PyTorch 2
    if (_onnx_export() if compiled else _is_tracing()):
        return "traced"
    if _transforms_active():
        return TRANSFORMED
    if x.dtype not in _FLOAT_SET:
        return f"dtype {str(x.dtype)[6:]}"
    n = x.dim()
    if n == 0:
        return "0-d"
    if n > MAX_DIMS:
        return f"more than {MAX_DIMS} dimensions"
    kind = "cuda" if x.is_cuda else "cpu" if x.is_cpu else x.device.type
    ok = _available.get(kind)
    if ok is None:
        ok = _available[kind] = available(kind)
    if not ok:
        return f"no {kind} backend"
    if not x.is_contiguous():
        return "non-contiguous"
    if data and not compiled and x.data_ptr() % x.element_size():
        return MISALIGNED
    return None


class Forms:
    """What this thread knows of one tuple of tensor forms (admit): why
    the library refuses tensors of those forms whatever their data (None:
    it takes them), their element size, the call plans made for them
    (described's plans), by call, and their device's queue_getter. A kernel
    call given Forms calls the library function itself, passing queue()."""
    __slots__ = ("why", "elem", "plans", "queue")

    def __init__(self, why, elem, queue):
        self.why, self.elem, self.plans, self.queue = why, elem, {}, queue


class _FormsSeen(threading.local):
    def __init__(self):
        self.entries = {}


_forms_seen = _FormsSeen()


def admit(first, *others):
    """(why, forms): why the library does not take a call on first and
    others (unsupported's answer), or None and the Forms of their forms,
    which the kernel calls take instead of describing the tensors again.
    Whatever the forms decide is asked once per forms and thread; each call
    asks only what its tensors' data and the moment decide (subclasses,
    alignment, a trace, a fork). Under torch.compile: (unsupported's answer,
    None); on MPS, where each call is described afresh, no Forms."""
    if type(first) not in PLAIN or _forked or compiling():
        return unsupported(first, *others), None
    if _c_is_tracing():  # (not compiling: the C question, cheaper than torch.jit's)
        return "traced", None
    if _transforms_active():
        return TRANSFORMED, None
    key = (first.shape, first.stride(), first.dtype, first.device)
    for t in others:
        if t is None:
            key += (None,)
        elif type(t) in PLAIN:
            key += (t.shape, t.stride(), t.dtype, t.device)
        else:
            return unsupported(first, *others), None
    entries = _forms_seen.entries
    forms = entries.get(key)
    if forms is None:
        if len(entries) >= _MAX_PLANS:
            entries.clear()
        forms = entries[key] = Forms(unsupported(first, *others, data=False), first.element_size(),
                                     queue_getter(first.device))
    if forms.why is not None:
        return forms.why, None
    elem = forms.elem
    if first.data_ptr() % elem:
        return MISALIGNED, None
    for t in others:
        if t is not None and t.data_ptr() % elem:
            return MISALIGNED, None
    return None, (forms if forms.queue is not None else None)


def unsupported_any_layout(x):
    """unsupported_one(x) but for the layout: for callers that copy x
    contiguous, or whose kernel takes its strides."""
    why = unsupported_one(x)
    if why == "non-contiguous":
        return MISALIGNED if not compiling() and x.data_ptr() % x.element_size() else None
    return why


def unsupported(first, *others, data=True):
    """unsupported_one(first), and every other tensor (None skipped) plain,
    of first's dtype and device, contiguous and (unless data is False)
    aligned to its elements."""
    why = unsupported_one(first, data)
    if why is not None or not others:
        return why
    dtype, device, pointers = first.dtype, first.device, data and not compiling()
    for t in others:
        if t is None:
            continue
        if type(t) not in PLAIN:
            return "tensor subclass" if isinstance(t, torch.Tensor) else f"{type(t).__name__} where a tensor goes"
        if t.dtype != dtype:
            return "mixed dtypes"
        if t.device != device:
            return "mixed devices"
        if not t.is_contiguous():
            return "non-contiguous"
        if pointers and t.data_ptr() % t.element_size():
            return MISALIGNED
    return None


# The smallest double that rounds to infinity as a float32.
FLOAT32_OVERFLOW = 3.4028235677973366e38


def eps_refused(eps):
    """Why the library refuses eps (it must be finite and >= 0 as a float32),
    or None."""
    if isinstance(eps, (int, float)) and 0 <= eps < FLOAT32_OVERFLOW:
        return None
    return f"eps {eps!r}"
