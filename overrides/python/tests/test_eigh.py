"""metalcore.linalg.eigh and eigvalsh against torch.linalg's, on every
backend present: orders on both sides of a warp, batches, both triangles,
16-bit inputs, repeated eigenvalues, NaN among regular matrices, gradients,
the custom op under torch.compile, the overrides, and what PyTorch keeps."""
import pytest
import torch

import metalcore

from conftest import close

TOL = {torch.float32: 1e-4, torch.bfloat16: 5e-2, torch.float16: 1e-2}
EIGVALSH = torch.linalg.eigvalsh  # PyTorch's, whatever is patched later


def symmetric(batch, n, dtype, device, gen, upper=False):
    """A symmetric N(0, 1) matrix made in float64 and rounded to dtype, the
    triangle not read set to NaN."""
    b = torch.randn(*batch, n, n, generator=gen, dtype=torch.float64)
    a = (b + b.mT).to(dtype)
    unread = torch.ones(n, n, dtype=torch.bool).tril(-1) if upper else torch.ones(n, n, dtype=torch.bool).triu(1)
    return a.masked_fill(unread, float("nan")).to(device), a


def check(w, v, a, dtype, what):
    """w ascending, A V = V diag(w) and Vᵀ V = I, and w against PyTorch's
    float64 eigenvalues (a: the full symmetric matrix)."""
    a64 = a.double().cpu()
    w64, v64 = w.double().cpu(), v.double().cpu()
    assert (w64[..., 1:] >= w64[..., :-1]).all(), what
    close(w64, EIGVALSH(a64), dtype, f"{what} eigenvalues", tol=TOL[dtype])
    close(a64 @ v64, v64 * w64.unsqueeze(-2), dtype, f"{what} A V = V diag(w)", tol=TOL[dtype])
    n = a.shape[-1]
    close(v64.mT @ v64, torch.eye(n, dtype=torch.float64).expand_as(v64), dtype, f"{what} Vᵀ V", tol=TOL[dtype])


@pytest.mark.parametrize("n", [1, 2, 3, 7, 16, 32, 33, 64, 128])
@pytest.mark.parametrize("batch", [(4,), (2, 3)])
@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_matches_torch(device, n, batch, upper, dtype):
    if device == "mps" and n > 60:
        pytest.skip("past the orders Metal's kernel holds (PyTorch's there)")
    gen = torch.Generator().manual_seed(n * 7 + len(batch) + upper)
    a, full = symmetric(batch, n, dtype, device, gen, upper)
    uplo = "U" if upper else "L"
    metalcore.reset_call_counts()
    w, v = metalcore.linalg.eigh(a, UPLO=uplo)
    assert metalcore.call_counts() == {"eigh": 1}
    assert w.dtype == v.dtype == dtype and w.shape == a.shape[:-1] and v.shape == a.shape
    check(w, v, full, dtype, f"n={n}")
    assert torch.equal(metalcore.linalg.eigvalsh(a, UPLO=uplo), w)


def test_repeated_zero_and_nan(device):
    """Repeated eigenvalues and a zero matrix decompose; a NaN or an
    infinity in one matrix of a batch raises PyTorch's error naming it, and
    eigh never hangs on it."""
    gen = torch.Generator().manual_seed(3)
    q = torch.linalg.qr(torch.randn(9, 9, generator=gen, dtype=torch.float64))[0]
    d = torch.tensor([1.0, 1, 1, 2, 2, 2, 2, 5, 5], dtype=torch.float64)
    a = torch.stack([q @ torch.diag(d) @ q.T, torch.zeros(9, 9, dtype=torch.float64)]).float()
    w, v = metalcore.linalg.eigh(a.to(device))
    check(w, v, a, torch.float32, "repeated")
    bad = a.clone()
    bad[1, 4, 2] = float("nan")
    with pytest.raises(torch.linalg.LinAlgError, match=r"linalg.eigh: \(Batch element 1\).*failed to converge"):
        metalcore.linalg.eigh(bad.to(device))
    bad[1, 4, 2] = float("inf")
    with pytest.raises(torch.linalg.LinAlgError, match=r"Batch element 1"):
        metalcore.linalg.eigvalsh(bad.to(device))


def test_gradient(device):
    """The gradient of A through eigenvalues and (sign-invariant functions
    of) eigenvectors, as PyTorch's; and through eigvalsh alone."""
    gen = torch.Generator().manual_seed(5)
    _, a = symmetric((3,), 6, torch.float64, "cpu", gen)
    ours, ref = a.float().to(device).requires_grad_(), a.clone().requires_grad_()
    g = torch.randn(6, 6, generator=gen, dtype=torch.float64)

    def loss(w, v):
        return (w * torch.arange(6, dtype=w.dtype, device=w.device)).sum() + ((v * v) * g.to(v)).sum()

    loss(*metalcore.linalg.eigh(ours)).backward()
    loss(*torch.linalg.eigh(ref)).backward()
    close(ours.grad.cpu(), ref.grad, torch.float32, "dA", tol=1e-3)
    ours.grad = ref.grad = None
    metalcore.linalg.eigvalsh(ours).square().sum().backward()
    torch.linalg.eigvalsh(ref).square().sum().backward()
    close(ours.grad.cpu(), ref.grad, torch.float32, "dA through eigvalsh", tol=1e-3)


def test_pytorch_keeps_the_rest(device):
    """float64, a bad UPLO and orders past what metalcore takes are
    PyTorch's, counted; an empty batch and a non-contiguous A are
    metalcore's."""
    gen = torch.Generator().manual_seed(9)
    metalcore.reset_fallback_counts()
    metalcore.reset_call_counts()
    _, a64 = symmetric((2,), 5, torch.float64, device, gen)
    torch.testing.assert_close(metalcore.linalg.eigvalsh(a64.to(device)), torch.linalg.eigvalsh(a64.to(device)))
    _, big = symmetric((2,), 300, torch.float32, device, gen)
    big = big.to(device)
    torch.testing.assert_close(metalcore.linalg.eigvalsh(big), torch.linalg.eigvalsh(big), rtol=1e-4, atol=1e-3)
    with pytest.raises(RuntimeError):
        metalcore.linalg.eigh(big, UPLO="X")
    fell = metalcore.fallback_counts()["eigvalsh"]
    assert "dtype float64" in fell and any(r.startswith("order") for r in fell), fell
    assert metalcore.call_counts() == {}
    empty = metalcore.linalg.eigh(torch.empty(0, 4, 4, device=device))
    assert empty[0].shape == (0, 4) and empty[1].shape == (0, 4, 4)
    _, a = symmetric((3,), 8, torch.float32, device, gen)
    w, v = metalcore.linalg.eigh(a.to(device).mT)
    check(w, v, a, torch.float32, "transposed view")


def test_overrides(device):
    """torch.linalg.eigh and eigvalsh patched: batches are metalcore's
    (PyTorch's named tuple and error), a single matrix, float64 and out=
    PyTorch's, counted, and on CUDA batches too small to be faster."""
    gen = torch.Generator().manual_seed(11)
    _, a = symmetric((4,), 12, torch.float32, device, gen)
    a = a.to(device)
    metalcore.reset_call_counts()
    metalcore.reset_fallback_counts()
    with metalcore.pytorch_overrides(ops=["eigh"]):
        res = torch.linalg.eigh(a)
        check(res.eigenvalues, res.eigenvectors, a, torch.float32, "override")
        close(torch.linalg.eigvalsh(a, "U").cpu(), res.eigenvalues.cpu(), torch.float32, "eigvalsh", tol=1e-5)
        assert metalcore.call_counts() == {"eigh": 2}
        bad = a.clone()
        bad[2, 0, 0] = float("nan")
        with pytest.raises(torch.linalg.LinAlgError, match=r"Batch element 2"):
            torch.linalg.eigh(bad)
        torch.linalg.eigh(a.double())
        torch.linalg.eigvalsh(a, out=torch.empty(a.shape[:-1], device=device))
        torch.linalg.eigh(a[0])
        _, small = symmetric((8,), 24, torch.float32, device, gen)
        torch.linalg.eigvalsh(small.to(device))
        _, single = symmetric((1,), 48, torch.float32, device, gen)  # the CPU's from order 48
        res = torch.linalg.eigh(single.to(device)[0])
        check(res.eigenvalues, res.eigenvectors, single[0].to(device), torch.float32, "single")
    fell = metalcore.fallback_counts()["eigh"]
    assert fell.get("dtype float64") == 1 and fell.get("out=") == 1
    assert fell.get("fewer than 2 matrices of order 12") == 1
    assert fell.get("fewer than 256 matrices of order 24") == (1 if device == "cuda" else None)
    assert fell.get("fewer than 2 matrices of order 48") == (None if device == "cpu" else 1)
    assert metalcore.call_counts() == {"eigh": 3 + 2 * (device == "cpu")}  # with the NaN batch
    assert torch.linalg.eigh is metalcore.linalg._torch_eigh
