"""The MPS route's probe and dispatch, with PyTorch's MPS stream faked:
these machines have no Apple GPU, so the symbol lookup, the platform and
the device are stood in for, and the real functions' contracts checked."""
import ctypes
import sys
import warnings

import pytest
import torch

from metalcore import _lib, _mps
import metalcore


@pytest.fixture
def fresh():
    _mps.probe.cache_clear()
    _mps.warn_unavailable.cache_clear()
    yield
    _mps.probe.cache_clear()
    _mps.warn_unavailable.cache_clear()


QUEUE = 0x7000


def fake_libtorch(monkeypatch, stream=0x5000, missing=()):
    """Fakes macOS, an MPS device, libtorch's three functions and
    dispatch_sync_f: the current stream is `stream`, its encoder stream +
    0x10, asked for only on the stream's queue (where `log` records what
    ran); the table keeps the callbacks alive."""
    log = {"on_queue": False, "encoders": [], "queues": []}

    def encoder(s):
        log["encoders"].append(log["on_queue"])
        return s + 0x10

    def sync(queue, context, work):
        log["queues"].append(queue)
        log["on_queue"] = True
        try:
            work(context)
        finally:
            log["on_queue"] = False

    table = {_mps.STREAM_SYMBOL: ctypes.CFUNCTYPE(ctypes.c_void_p)(lambda: stream),
             _mps.ENCODER_SYMBOL: ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)(encoder),
             _mps.QUEUE_SYMBOL: ctypes.CFUNCTYPE(ctypes.c_void_p)(lambda: QUEUE),
             "dispatch_sync_f": ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, _mps._WORK)(sync)}
    monkeypatch.setattr(sys, "platform", "darwin")
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    monkeypatch.setattr(_mps, "_lookup", lambda name, images: 0 if name in missing else
                        ctypes.cast(table[name], ctypes.c_void_p).value)
    return table, log


def test_route_encodes_on_the_streams_queue(fresh, monkeypatch):
    """PyTorch encodes inside dispatch_sync on the stream's serial queue; a
    call through the route asks for the encoder and encodes there too."""
    keep, log = fake_libtorch(monkeypatch)
    route, why = _mps.probe(True)
    assert why is None and keep
    seen = []
    status = route.run(lambda a, b, enc: seen.append((a, b, enc, log["on_queue"])) or 7, (1, 2))
    assert status == 7 and seen == [(1, 2, 0x5010, True)]
    assert log["encoders"] == [True] and log["queues"] == [QUEUE]


@pytest.mark.parametrize("missing", [(_mps.STREAM_SYMBOL,), (_mps.ENCODER_SYMBOL,), (_mps.QUEUE_SYMBOL,)])
def test_a_missing_symbol_is_named(fresh, monkeypatch, missing):
    fake_libtorch(monkeypatch, missing=missing)
    route, why = _mps.probe(True)
    assert route is None and "getCurrentMPSStream" in why and "get_dispatch_queue" in why


def test_no_dispatch_sync_no_route(fresh, monkeypatch):
    fake_libtorch(monkeypatch, missing=("dispatch_sync_f",))
    route, why = _mps.probe(True)
    assert route is None and "dispatch_sync_f" in why


def test_lookup_searches_the_named_images():
    """Symbols come from libtorch's own images (the first that exports one),
    not the global namespace, which has them only under RTLD_GLOBAL."""
    import ctypes.util
    libc = ctypes.util.find_library("c")
    assert _mps._lookup("strlen", ["/nonexistent/libtorch_cpu.dylib", libc]) != 0
    assert _mps._lookup("no_such_symbol_anywhere", [libc]) == 0
    assert _mps._lookup("strlen", []) == 0
    assert all(p.endswith(".dylib") and "torch" in p for p in _mps.torch_images())


def test_no_metal_backend_no_route(fresh, monkeypatch):
    fake_libtorch(monkeypatch)
    route, why = _mps.probe(False)
    assert route is None and "Metal backend is unavailable" in why


def test_off_macos(fresh):
    if sys.platform == "darwin":
        pytest.skip("this checks the answer elsewhere than macOS")
    assert _mps.probe(True) == (None, "MPS is macOS only")


def test_mps_falls_back_with_one_warning(fresh):
    if sys.platform == "darwin":
        pytest.skip("this checks the fallback where Metal is absent")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert not _lib.available("mps")
        assert not _lib.available("mps")
    said = [str(w.message) for w in caught if "MPS" in str(w.message)]
    assert len(said) == 1 and "PyTorch's own ops" in said[0], said
    assert metalcore.info()["backends"]["mps"].startswith("unavailable: ")
    assert "mps" not in metalcore.backends()


class _Storage:
    def data_ptr(self):
        return 0xABC000


class _MPSView:
    """What describe reads of an MPS tensor, for a view 5 elements in."""
    def untyped_storage(self):
        return _Storage()

    def storage_offset(self):
        return 5

    def element_size(self):
        return 2


def test_buffer_and_offset_as_dlpack():
    # data is the storage's buffer, byte_offset the view's offset in bytes
    assert _mps.buffer_and_offset(_MPSView()) == (0xABC000, 10)


class _MPSTensor(_MPSView):
    """The rest of what the package reads of an MPS tensor: a 3 x 4 view."""
    is_cuda, is_mps, dtype, shape = False, True, torch.float32, torch.Size([3, 4])
    device = torch.device("mps", 0) if hasattr(torch.backends, "mps") else None

    def dim(self):
        return 2

    def element_size(self):
        return 4

    def is_contiguous(self):
        return True

    def numel(self):
        return 12

    def data_ptr(self):  # buffer + offset: never a handle, never to be described
        return 0xABC000 + 20


def test_mps_descriptions_carry_the_buffer_and_offset():
    """describe, and described (a call's block: an output like the input,
    LayerNorm's statistics as half of a tensor) name the buffer and the byte
    offset, never data_ptr(); an MPS call's block is made afresh, never kept
    to be patched with data_ptr()."""
    t = _MPSTensor()
    first = _lib.Tensor.from_address(_lib.describe(t, 0))
    key = ("mps test",)
    for _ in range(2):
        like, half = (_lib.Tensor.from_address(a) for a in _lib.described(key, (t, t), {1: 1}))
        for d in (first, like, half):
            assert d.data == 0xABC000 and d.device_type == 8
        assert first.byte_offset == like.byte_offset == 20 and half.byte_offset == 20 + 4 * 6
        assert list(first.shape[:2]) == [3, 4] and half.ndim == 1 and half.shape[0] == 6
    assert key not in _lib._plans.plans
