"""metalcore.linalg.solve and solve_ex against torch.linalg's, on every
backend present: orders on both sides of a warp, batches that broadcast,
vector and matrix right-hand sides, left and right, 16-bit inputs, singular
matrices among regular ones, gradients, the override, and what PyTorch
keeps."""
import pytest
import torch

import metalcore

from conftest import close

ORDERS = [1, 2, 3, 7, 16, 32, 33, 64, 128]
TOL = {torch.float32: 1e-4, torch.bfloat16: 5e-2, torch.float16: 1e-2}


def system(batch, n, k, dtype, device, gen):
    """A well-conditioned A (N(0, 1) plus 2 sqrt(n) on the diagonal) and B,
    made in float64 and rounded to dtype."""
    a = torch.randn(*batch, n, n, generator=gen, dtype=torch.float64) + 2 * n ** 0.5 * torch.eye(n, dtype=torch.float64)
    b = torch.randn(*batch, n, k, generator=gen, dtype=torch.float64)
    return a.to(dtype).to(device), b.to(dtype).to(device)


@pytest.mark.parametrize("n", ORDERS)
@pytest.mark.parametrize("batch", [(), (3,), (2, 2)])
@pytest.mark.parametrize("k", [1, 5, 40])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_matches_torch(device, n, batch, k, dtype):
    gen = torch.Generator().manual_seed(n * 7 + k + len(batch))
    a, b = system(batch, n, k, dtype, device, gen)
    metalcore.reset_call_counts()
    x, info = metalcore.linalg.solve_ex(a, b)
    assert metalcore.call_counts() == {"solve": 1}
    want = torch.linalg.solve(a.double().cpu(), b.double().cpu())
    assert x.dtype == dtype and x.shape == b.shape and info.dtype == torch.int32 and info.shape == a.shape[:-2]
    assert not info.any()
    close(x.cpu(), want, dtype, "x", tol=TOL[dtype])
    assert torch.equal(metalcore.linalg.solve(a, b), x)


def test_vectors_left_and_broadcasting(device):
    """B as vectors (PyTorch's rule), X A = B (left=False), and batch
    dimensions that broadcast, against torch.linalg.solve."""
    gen = torch.Generator().manual_seed(1)
    a, b = system((3, 1), 6, 4, torch.float32, device, gen)
    cases = [(a, b[..., 0]), (a[0, 0], b[0, 0, :, 0]), (a, b.mT.expand(3, 2, 4, 6)), (a, b[0])]
    for left, (aa, bb) in zip((True, True, False, True), cases):
        got = metalcore.linalg.solve(aa, bb, left=left)
        want = torch.linalg.solve(aa.double(), bb.double(), left=left)
        assert got.shape == want.shape
        close(got, want, torch.float32, f"left={left} {tuple(bb.shape)}", tol=1e-4)
    # a vector B with left=False: PyTorch refuses it, and so does metalcore (PyTorch's own call)
    with pytest.raises(RuntimeError) as theirs:
        torch.linalg.solve(a[0, 0], b[0, 0, :, 0], left=False)
    with pytest.raises(RuntimeError, match=str(theirs.value)[:20]):
        metalcore.linalg.solve(a[0, 0], b[0, 0, :, 0], left=False)


def test_singular_info_and_errors(device):
    """Singular matrices among regular ones: info is the first zero pivot,
    X NaN there; solve raises PyTorch's error for the first; a NaN in A
    gives NaN in X, never a hang."""
    gen = torch.Generator().manual_seed(3)
    a, b = system((4,), 9, 2, torch.float32, "cpu", gen)
    a[1] = 0
    a[2, :, 4] = 0
    a[3, 5, 2] = float("nan")
    x, info = metalcore.linalg.solve_ex(a.to(device), b.to(device))
    assert info.cpu().tolist() == [0, 1, 5, 0]
    assert torch.isnan(x[1:3]).all() and torch.isnan(x[3]).any()
    close(x[0].cpu(), torch.linalg.solve(a[0].double(), b[0].double()), torch.float32, "regular", tol=1e-4)
    with pytest.raises(torch.linalg.LinAlgError, match=r"\(Batch element 1\).*singular"):
        metalcore.linalg.solve(a.to(device), b.to(device))
    with pytest.raises(torch.linalg.LinAlgError, match="singular"):
        metalcore.linalg.solve_ex(a[2].to(device), b[2].to(device), check_errors=True)


@pytest.mark.parametrize("left", [True, False])
def test_gradient(device, left):
    """The gradients of A and B, as PyTorch's."""
    gen = torch.Generator().manual_seed(5)
    a, b = system((2,), 6, 3, torch.float32, device, gen)
    if not left:
        b = b.mT.contiguous()
    g = torch.randn(b.shape, generator=gen).to(device)
    ours = [t.clone().requires_grad_() for t in (a, b)]
    ref = [t.double().clone().requires_grad_() for t in (a, b)]
    (metalcore.linalg.solve(*ours, left=left) * g).sum().backward()
    (torch.linalg.solve(*ref, left=left) * g.double()).sum().backward()
    for o, r, name in zip(ours, ref, "AB"):
        close(o.grad, r.grad, torch.float32, f"d{name}", tol=1e-4)


def test_pytorch_keeps_the_rest(device):
    """float64, orders past 128 and mixed dtypes are PyTorch's, counted; an
    empty batch and non-contiguous operands are metalcore's."""
    gen = torch.Generator().manual_seed(9)
    metalcore.reset_fallback_counts()
    metalcore.reset_call_counts()
    a64, b64 = system((2,), 5, 1, torch.float64, device, gen)
    torch.testing.assert_close(metalcore.linalg.solve(a64, b64), torch.linalg.solve(a64, b64))
    big, bb = system((), 130, 1, torch.float32, device, gen)
    torch.testing.assert_close(metalcore.linalg.solve_ex(big, bb)[0], torch.linalg.solve(big, bb), rtol=1e-4, atol=1e-4)
    fell = metalcore.fallback_counts()["solve"]
    assert set(fell) == {"dtype float64", "order above 128"}
    assert metalcore.call_counts() == {}
    empty = metalcore.linalg.solve_ex(torch.empty(0, 4, 4, device=device), torch.empty(0, 4, 2, device=device))
    assert empty[0].shape == (0, 4, 2) and empty[1].shape == (0,)
    a, b = system((3,), 8, 2, torch.float32, device, gen)
    close(metalcore.linalg.solve(a.mT, b), torch.linalg.solve(a.mT.double(), b.double()), torch.float32, tol=1e-4)


def test_overrides(device):
    """torch.linalg.solve and solve_ex patched: batches are metalcore's
    (PyTorch's results, its named tuple, its error), a single CPU system,
    float64 and out= PyTorch's, counted."""
    gen = torch.Generator().manual_seed(11)
    a, b = system((4,), 12, 2, torch.float32, device, gen)
    want = torch.linalg.solve(a.double(), b.double())
    metalcore.reset_call_counts()
    metalcore.reset_fallback_counts()
    with metalcore.pytorch_overrides(ops=["solve"]):
        close(torch.linalg.solve(a, b), want, torch.float32, "solve", tol=1e-4)
        res = torch.linalg.solve_ex(a, b)
        close(res.result, want, torch.float32, "solve_ex", tol=1e-4)
        assert res.info.dtype == torch.int32 and not res.info.any()
        assert metalcore.call_counts() == {"solve": 2}
        bad = a.clone()
        bad[2] = 0
        with pytest.raises(torch.linalg.LinAlgError, match=r"Batch element 2"):
            torch.linalg.solve(bad, b)
        torch.linalg.solve(a.double(), b.double())
        torch.linalg.solve(a, b, out=torch.empty_like(b))
        torch.linalg.solve(a[0], b[0])
    fell = metalcore.fallback_counts()["solve"]
    assert fell.get("dtype float64") == 1 and fell.get("out=") == 1
    assert fell.get("one system on the CPU") == (1 if device == "cpu" else None)
    assert torch.linalg.solve is metalcore.linalg._torch_solve
