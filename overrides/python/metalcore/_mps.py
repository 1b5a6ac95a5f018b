"""PyTorch's MPS tensors on metalcore's Metal backend.

metalcore encodes on the compute encoder PyTorch's current MPS stream is
recording (never ending it, committing or waiting), found through two
functions libtorch exports: at::mps::getCurrentMPSStream() and
at::mps::MPSStream::commandEncoder() (MPSStream is declared TORCH_API in
ATen/mps/MPSStream.h). PyTorch encodes only inside dispatch_sync on the
stream's serial queue; so does metalcore (Route.run: the queue from
torch::mps::get_dispatch_queue(), libdispatch's dispatch_sync_f), or another
thread's MPS op could interleave with a call or end the encoder under it.
The symbols are looked up in libtorch's own images, not the process's global
namespace (which has them only when libtorch was loaded RTLD_GLOBAL).
That route keeps PyTorch's order of work and the
library's own validation and launch plans; torch.mps.compile_shader (2.7+)
would compile the library's MSL again in PyTorch and dispatch with its own
grid, without threadgroup memory lengths, resident buffers or inline tables
of 3.7 KB, so it cannot run the plans the library builds.

An MPS tensor is described as DLPack describes it: data is its storage's
id<MTLBuffer> (untyped_storage().data_ptr()), byte_offset its offset into
it; data_ptr() is buffer + offset, not a handle.

probe() says whether every piece is there (macOS, an MPS device, the Metal
backend of the library, both symbols); where one is missing, MPS calls fall
back to PyTorch's own ops, with one warning naming what is missing.
"""
import ctypes
import functools
import os
import sys
import torch

from ._warn import warn

# Itanium-mangled names of the functions (dlsym adds macOS's underscore)
STREAM_SYMBOL = "_ZN2at3mps19getCurrentMPSStreamEv"
ENCODER_SYMBOL = "_ZN2at3mps9MPSStream14commandEncoderEv"
QUEUE_SYMBOL = "_ZN5torch3mps18get_dispatch_queueEv"
# the images libtorch's MPS code and its C++ API may be in
TORCH_IMAGES = ("libtorch_cpu.dylib", "libtorch.dylib", "libtorch_python.dylib")
LIBDISPATCH = "/usr/lib/libSystem.B.dylib"


def _lookup(name, images):
    """The address of name in the first of images (paths) that exports it
    (0 when none does)."""
    for path in images:
        try:
            return ctypes.cast(getattr(ctypes.CDLL(path), name), ctypes.c_void_p).value or 0
        except (AttributeError, OSError):
            continue
    return 0


def torch_images():
    lib = os.path.join(os.path.dirname(torch.__file__), "lib")
    return [os.path.join(lib, name) for name in TORCH_IMAGES]


_WORK = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class Route:
    """PyTorch's current MPS stream, reached through libtorch's exports."""

    def __init__(self, stream_fn, encoder_fn, queue_fn, sync_fn):
        self.current_stream = ctypes.CFUNCTYPE(ctypes.c_void_p)(stream_fn)
        self.command_encoder = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)(encoder_fn)
        self.queue = ctypes.CFUNCTYPE(ctypes.c_void_p)(queue_fn)
        self.dispatch_sync_f = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, _WORK)(sync_fn)

    def run(self, fn, args):
        """fn(*args, encoder) on the stream's serial queue, as PyTorch encodes:
        the encoder is asked for and used there; returns fn's status."""
        out = []

        def work(_):
            out.append(fn(*args, self.command_encoder(self.current_stream())))

        self.dispatch_sync_f(self.queue(), None, _WORK(work))
        return out[0]


@functools.lru_cache(maxsize=None)
def probe(metal_available):
    """(route, None) when MPS tensors can go to metalcore, else (None, why)."""
    if sys.platform != "darwin":
        return None, "MPS is macOS only"
    mps = getattr(torch.backends, "mps", None)
    if mps is None or not mps.is_available():
        return None, "PyTorch has no MPS device here"
    if not metal_available:
        return None, "the library's Metal backend is unavailable"
    images = torch_images()
    stream_fn, encoder_fn = _lookup(STREAM_SYMBOL, images), _lookup(ENCODER_SYMBOL, images)
    queue_fn, sync_fn = _lookup(QUEUE_SYMBOL, images), _lookup("dispatch_sync_f", [LIBDISPATCH])
    if not stream_fn or not encoder_fn or not queue_fn:
        return None, ("libtorch does not export at::mps::getCurrentMPSStream, MPSStream::commandEncoder and "
                      "torch::mps::get_dispatch_queue")
    if not sync_fn:
        return None, "libdispatch's dispatch_sync_f cannot be found"
    return Route(stream_fn, encoder_fn, queue_fn, sync_fn), None


@functools.lru_cache(maxsize=None)
def warn_unavailable(why):
    warn(f"metalcore: MPS tensors use PyTorch's own ops ({why})")


def buffer_and_offset(t):
    """The id<MTLBuffer> holding t and t's byte offset into it."""
    return t.untyped_storage().data_ptr(), t.storage_offset() * t.element_size()
