"""PyTorch's MPS tensors on metalcore's Metal backend.

metalcore encodes on the compute encoder PyTorch's current MPS stream is
recording (never ending it, committing or waiting), found through two
functions libtorch exports: at::mps::getCurrentMPSStream() and
at::mps::MPSStream::commandEncoder() (MPSStream is declared TORCH_API in
ATen/mps/MPSStream.h). That route keeps PyTorch's order of work and the
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
import sys
import torch

from ._warn import warn

# Itanium-mangled names of the two functions (dlsym adds macOS's underscore)
STREAM_SYMBOL = "_ZN2at3mps19getCurrentMPSStreamEv"
ENCODER_SYMBOL = "_ZN2at3mps9MPSStream14commandEncoderEv"


def _lookup(name):
    """The address of an exported libtorch function (0 when absent)."""
    try:
        return ctypes.cast(getattr(ctypes.CDLL(None), name), ctypes.c_void_p).value or 0
    except (AttributeError, OSError):
        return 0


class _Route:
    def __init__(self, stream_fn, encoder_fn):
        self.current_stream = ctypes.CFUNCTYPE(ctypes.c_void_p)(stream_fn)
        self.command_encoder = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)(encoder_fn)

    def encoder(self):
        return self.command_encoder(self.current_stream())


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
    stream_fn, encoder_fn = _lookup(STREAM_SYMBOL), _lookup(ENCODER_SYMBOL)
    if not stream_fn or not encoder_fn:
        return None, "libtorch does not export at::mps::getCurrentMPSStream and MPSStream::commandEncoder"
    return _Route(stream_fn, encoder_fn), None


@functools.lru_cache(maxsize=None)
def warn_unavailable(why):
    warn(f"metalcore: MPS tensors use PyTorch's own ops ({why})")


def buffer_and_offset(t):
    """The id<MTLBuffer> holding t and t's byte offset into it."""
    return t.untyped_storage().data_ptr(), t.storage_offset() * t.element_size()
