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


def fake_libtorch(monkeypatch, stream=0x5000, missing=()):
    """Fakes macOS, an MPS device and libtorch's two functions: the current
    stream is `stream`, its encoder stream + 0x10 (kept alive by the test)."""
    stream_fn = ctypes.CFUNCTYPE(ctypes.c_void_p)(lambda: stream)
    encoder_fn = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)(lambda s: s + 0x10)
    table = {_mps.STREAM_SYMBOL: stream_fn, _mps.ENCODER_SYMBOL: encoder_fn}
    monkeypatch.setattr(sys, "platform", "darwin")
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    monkeypatch.setattr(_mps, "_lookup", lambda name: 0 if name in missing else
                        ctypes.cast(table[name], ctypes.c_void_p).value)
    return table


def test_route_finds_the_current_streams_encoder(fresh, monkeypatch):
    keep = fake_libtorch(monkeypatch)
    route, why = _mps.probe(True)
    assert why is None and keep
    assert route.encoder() == 0x5010


@pytest.mark.parametrize("missing", [(_mps.STREAM_SYMBOL,), (_mps.ENCODER_SYMBOL,)])
def test_a_missing_symbol_is_named(fresh, monkeypatch, missing):
    fake_libtorch(monkeypatch, missing=missing)
    route, why = _mps.probe(True)
    assert route is None and "getCurrentMPSStream" in why


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
