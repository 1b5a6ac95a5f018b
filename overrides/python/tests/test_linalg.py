"""metalcore.linalg.qr against torch.linalg.qr, and its override."""
import pytest
import torch

import metalcore

ORIGINAL = torch.linalg.qr


@pytest.mark.parametrize("shape", [(1, 1), (5, 5), (7, 3), (3, 7), (4, 33, 17), (2, 2, 16, 16), (2, 140, 100)])
@pytest.mark.parametrize("mode", ["reduced", "complete", "r"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_matches_torch(shape, mode, dtype, device):
    a = torch.randn(*shape, dtype=torch.float64).to(dtype).to(device)
    q, r = metalcore.linalg.qr(a, mode)
    qt, rt = ORIGINAL(a.double(), mode)  # same sign convention (LAPACK), so the factors agree
    tol = 1e-4 if dtype == torch.float32 else 5e-2
    torch.testing.assert_close(r.double(), rt, rtol=tol, atol=tol * rt.abs().max().item())
    if mode == "r":
        assert q.numel() == 0
    else:
        torch.testing.assert_close(q.double(), qt, rtol=tol, atol=tol)
        torch.testing.assert_close((q.double() @ r.double()), a.double(), rtol=tol, atol=tol * 4)


def test_override_and_fallbacks():
    calls = []

    def spy(*args, **kwargs):
        calls.append(1)
        return ORIGINAL(*args, **kwargs)

    torch.linalg.qr = spy
    try:
        with metalcore.pytorch_overrides(ops=["qr"]):
            a = torch.randn(6, 4)
            res = torch.linalg.qr(a)
            torch.testing.assert_close(res.Q @ res.R, a, rtol=1e-5, atol=1e-5)
            assert calls == []
            torch.linalg.qr(a.double())                      # float64
            torch.linalg.qr(a.clone().requires_grad_())      # differentiable: PyTorch's backward
            torch.linalg.qr(a.t())                           # non-contiguous
            out = (torch.empty(6, 4), torch.empty(4, 4))
            torch.linalg.qr(a, out=out)                      # out=
            assert len(calls) == 4
        assert torch.linalg.qr is spy
    finally:
        torch.linalg.qr = ORIGINAL


def test_refuses_what_it_does_not_take():
    with pytest.raises(ValueError):
        metalcore.linalg.qr(torch.randn(3))
    with pytest.raises(ValueError):
        metalcore.linalg.qr(torch.randn(3, 3), "economic")
