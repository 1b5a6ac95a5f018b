"""The tests run against whichever metalcore Python imports: the installed
package (make test-python), or the source tree with overrides/python on
PYTHONPATH."""
import pathlib

import pytest
import torch
import torch.nn.functional as F

import metalcore

HEADER = pathlib.Path(__file__).resolve().parents[3] / "include" / "metalcore.h"

DEVICES = metalcore.backends()
# PyTorch's functions before any test patches them
ORIGINALS = {name: getattr(F, name) for name in ("layer_norm", "softmax", "gelu", "silu")}


# The overrides' size below which CUDA calls stay PyTorch's, as shipped
SMALL_CUDA_BYTES = metalcore._overrides.SMALL_CUDA_BYTES


@pytest.fixture(autouse=True)
def overrides_take_small_cuda_inputs(monkeypatch):
    """The suite's CUDA tensors are small: the overrides send them to
    metalcore here (test_overrides checks the shipped threshold)."""
    monkeypatch.setattr(metalcore._overrides, "SMALL_CUDA_BYTES", 0)


@pytest.fixture
def restore_overrides():
    """Turns the overrides off after the test and checks the originals are back."""
    yield
    metalcore.disable_pytorch_overrides()
    for name, fn in ORIGINALS.items():
        assert getattr(F, name) is fn
TOL = {torch.float32: 2e-5, torch.bfloat16: 2e-2, torch.float16: 3e-3}


@pytest.fixture(params=["cpu", "cuda"])
def device(request):
    if request.param not in DEVICES:
        pytest.skip(f"no metalcore {request.param} backend on this machine")
    return request.param


def close(got, want, dtype, what="", tol=None):
    """Relative error in norm, with a floor of 1e-3 per element of magnitude:
    results that cancel to about zero (one-column norms) are compared
    against the size of their terms, not against zero."""
    floor = 1e-3 * want.numel() ** 0.5
    err = ((got.double() - want.double()).norm() / want.double().norm().clamp_min(floor)).item()
    tol = tol or TOL[dtype]
    assert err < tol, f"{what}: relative error {err:.2e}"
