"""metalcore.linalg.cholesky and cholesky_ex against torch.linalg's, on
every backend present: orders on both sides of a warp, batches, both
triangles, 16-bit inputs, matrices that are not positive-definite among ones
that are, gradients, and what PyTorch keeps."""
import pytest
import torch

import metalcore

from conftest import close

ORDERS = [1, 2, 3, 7, 16, 32, 33, 64, 128]


def spd(batch, n, dtype, device, gen, shift=1.0):
    """B Bᵀ/n + shift·I, made in float64 and rounded to dtype."""
    b = torch.randn(*batch, n, n, generator=gen, dtype=torch.float64)
    a = b @ b.mT / n + shift * torch.eye(n, dtype=torch.float64)
    return a.to(dtype).to(device)


@pytest.mark.parametrize("n", ORDERS)
@pytest.mark.parametrize("batch", [(), (3,), (2, 2)])
@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_matches_torch(device, n, batch, upper, dtype):
    gen = torch.Generator().manual_seed(n * 7 + len(batch))
    a = spd(batch, n, dtype, device, gen)
    # the triangle not read holds NaN
    other = torch.ones(n, n, dtype=torch.bool, device=device).tril(-1)
    poisoned = a.masked_fill(other if upper else other.mT, float("nan"))
    metalcore.reset_call_counts()
    l, info = metalcore.linalg.cholesky_ex(poisoned, upper=upper)
    assert metalcore.call_counts() == {"cholesky": 1}
    want = torch.linalg.cholesky(a.double().cpu(), upper=upper)
    assert l.dtype == dtype and l.shape == a.shape and info.dtype == torch.int32 and info.shape == a.shape[:-2]
    assert not info.any()
    close(l.cpu(), want, dtype, "factor", tol={torch.float32: 1e-5, torch.bfloat16: 1e-2, torch.float16: 2e-3}[dtype])
    assert torch.equal(metalcore.linalg.cholesky(poisoned, upper=upper), l)


def test_info_and_errors(device):
    """A batch mixing positive-definite matrices with ones that are not:
    info as PyTorch's, cholesky raising PyTorch's error for the first. A
    NaN is reported (PyTorch's LAPACK may instead return a NaN factor)."""
    gen = torch.Generator().manual_seed(3)
    a = spd((4,), 9, torch.float32, "cpu", gen)
    a[1, 4, 4] = -20  # the minor of order 5 is not positive-definite
    a[2] = 0
    a[3, 6, 2] = a[3, 2, 6] = float("nan")
    l, info = metalcore.linalg.cholesky_ex(a.to(device))
    _, want = torch.linalg.cholesky_ex(a)
    assert info[:3].cpu().tolist() == want[:3].tolist() == [0, 5, 1] and info[3] > 0
    close(l[0].cpu(), torch.linalg.cholesky(a[0].double()), torch.float32)
    with pytest.raises(torch.linalg.LinAlgError, match=r"\(Batch element 1\).*order 5 is not"):
        metalcore.linalg.cholesky(a.to(device))
    with pytest.raises(torch.linalg.LinAlgError, match="order 5"):
        metalcore.linalg.cholesky_ex(a[1].to(device), check_errors=True)


def test_gradient(device):
    """The gradient of A, as PyTorch's (a function of the factor of a
    symmetric input), both triangles."""
    gen = torch.Generator().manual_seed(5)
    a = spd((2,), 6, torch.float32, device, gen)
    g = torch.randn(2, 6, 6, generator=gen).to(device)
    for upper in (False, True):
        ours, ref = a.clone().requires_grad_(), a.double().clone().requires_grad_()
        (metalcore.linalg.cholesky(ours, upper=upper) * g).sum().backward()
        (torch.linalg.cholesky(ref, upper=upper) * g.double()).sum().backward()
        close(ours.grad, ref.grad, torch.float32, "dA", tol=1e-4)


def test_pytorch_keeps_the_rest(device):
    """float64, orders past what metalcore holds, and non-square input are
    PyTorch's, counted; an empty batch and a non-contiguous input are
    metalcore's."""
    gen = torch.Generator().manual_seed(9)
    metalcore.reset_fallback_counts()
    metalcore.reset_call_counts()
    a64 = spd((2,), 5, torch.float64, device, gen)
    torch.testing.assert_close(metalcore.linalg.cholesky(a64), torch.linalg.cholesky(a64))
    big = spd((), 130, torch.float32, device, gen)
    torch.testing.assert_close(metalcore.linalg.cholesky_ex(big)[0], torch.linalg.cholesky(big))
    assert set(metalcore.fallback_counts()["cholesky"]) == {"dtype float64", "order above 128"}
    assert metalcore.call_counts() == {}
    empty = metalcore.linalg.cholesky_ex(torch.empty(0, 4, 4, device=device))
    assert empty[0].shape == (0, 4, 4) and empty[1].shape == (0,)
    a = spd((3,), 8, torch.float32, device, gen)
    close(metalcore.linalg.cholesky(a.mT), torch.linalg.cholesky(a.double()), torch.float32)


def test_overrides(device):
    """torch.linalg.cholesky and cholesky_ex patched: batches are
    metalcore's (PyTorch's results, its named tuple, its error), a single CPU
    matrix, orders above 128, float64 and out= PyTorch's, counted."""
    gen = torch.Generator().manual_seed(11)
    a = spd((4,), 12, torch.float32, device, gen)
    want = torch.linalg.cholesky(a.double())
    metalcore.reset_call_counts()
    metalcore.reset_fallback_counts()
    with metalcore.pytorch_overrides(ops=["cholesky"]):
        close(torch.linalg.cholesky(a), want, torch.float32, "cholesky")
        res = torch.linalg.cholesky_ex(a, upper=True)
        close(res.L, want.mT, torch.float32, "cholesky_ex upper")
        assert res.info.dtype == torch.int32 and not res.info.any()
        assert metalcore.call_counts() == {"cholesky": 2}
        bad = a.clone()
        bad[2, 3, 3] = -1
        with pytest.raises(torch.linalg.LinAlgError, match=r"Batch element 2"):
            torch.linalg.cholesky(bad)
        torch.linalg.cholesky(a.double())
        torch.linalg.cholesky_ex(a, out=(torch.empty_like(a), torch.empty(4, dtype=torch.int32, device=device)))
        torch.linalg.cholesky(a[0])
        torch.linalg.cholesky(spd((2,), 140, torch.float32, device, gen))
    fell = metalcore.fallback_counts()["cholesky"]
    assert fell.get("order above 128") == 1
    assert fell.get("dtype float64") == 1 and fell.get("out=") == 1
    assert fell.get("one matrix on the CPU") == (1 if device == "cpu" else None)
    assert torch.linalg.cholesky is metalcore.linalg._torch_cholesky
