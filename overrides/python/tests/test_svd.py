"""metalcore.linalg.svd and svdvals against torch.linalg's, on every backend
present: square, tall and wide matrices, batches, 16-bit inputs,
rank-deficient, zero and orthogonal matrices (U and Vh stay orthonormal),
NaN among regular matrices, gradients, the overrides, and what PyTorch
keeps."""
import pytest
import torch

import metalcore

from conftest import close

TOL = {torch.float32: 1e-4, torch.bfloat16: 5e-2, torch.float16: 1e-2}
SVDVALS = torch.linalg.svdvals  # PyTorch's, whatever is patched later


def check(u, s, vh, a, dtype, what):
    """s descending and against PyTorch's float64 singular values, A = U
    diag(s) Vh, Uᵀ U = I and Vh Vhᵀ = I."""
    a64, s64 = a.double().cpu(), s.double().cpu()
    assert (s64[..., 1:] <= s64[..., :-1]).all(), what
    close(s64, SVDVALS(a64), dtype, f"{what} singular values", tol=TOL[dtype])
    if u is None:
        return
    u64, vh64 = u.double().cpu(), vh.double().cpu()
    k = s.shape[-1]
    eye = torch.eye(k, dtype=torch.float64)
    close((u64 * s64.unsqueeze(-2)) @ vh64, a64, dtype, f"{what} U diag(s) Vh", tol=TOL[dtype])
    close(u64.mT @ u64, eye.expand(*a.shape[:-2], k, k), dtype, f"{what} Uᵀ U", tol=TOL[dtype])
    close(vh64 @ vh64.mT, eye.expand(*a.shape[:-2], k, k), dtype, f"{what} Vh Vhᵀ", tol=TOL[dtype])


@pytest.mark.parametrize("shape", [(1, 1), (2, 2), (3, 3), (7, 7), (16, 16), (32, 32), (33, 33), (40, 9), (9, 40),
                                   (64, 16), (1, 6), (70, 50), (50, 70), (128, 128)])
@pytest.mark.parametrize("batch", [(4,), (2, 3)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_matches_torch(device, shape, batch, dtype):
    if device == "mps" and max(shape) > 64:
        pytest.skip("past what Metal's kernel holds (PyTorch's there)")
    gen = torch.Generator().manual_seed(sum(shape) * 7 + len(batch))
    a = torch.randn(*batch, *shape, generator=gen).to(dtype).to(device)
    metalcore.reset_call_counts()
    u, s, vh = metalcore.linalg.svd(a)
    assert metalcore.call_counts() == {"svd": 1}
    k = min(shape)
    assert u.dtype == s.dtype == vh.dtype == dtype
    assert u.shape == (*batch, shape[0], k) and s.shape == (*batch, k) and vh.shape == (*batch, k, shape[1])
    check(u, s, vh, a, dtype, f"{shape}")
    assert torch.equal(metalcore.linalg.svdvals(a), s)


def test_special_matrices(device):
    """Zero, rank-one, orthogonal and repeated-value matrices decompose with
    orthonormal U and Vh; a NaN or an infinity in one matrix of a batch
    raises PyTorch's error naming it, and svd never hangs on it."""
    gen = torch.Generator().manual_seed(3)
    q = torch.linalg.qr(torch.randn(9, 9, generator=gen, dtype=torch.float64))[0]
    p = torch.linalg.qr(torch.randn(9, 9, generator=gen, dtype=torch.float64))[0]
    d = torch.tensor([5.0, 5, 2, 2, 2, 1, 1, 1, 1], dtype=torch.float64)
    rank1 = torch.outer(q[:, 0], p[:, 0])
    a = torch.stack([torch.zeros(9, 9, dtype=torch.float64), rank1, q, q @ torch.diag(d) @ p.T]).float()
    u, s, vh = metalcore.linalg.svd(a.to(device))
    check(u, s, vh, a, torch.float32, "special")
    bad = a.clone()
    bad[1, 4, 2] = float("nan")
    with pytest.raises(torch.linalg.LinAlgError, match=r"linalg.svd: \(Batch element 1\).*non-finite"):
        metalcore.linalg.svd(bad.to(device))
    bad[1, 4, 2] = float("inf")
    with pytest.raises(torch.linalg.LinAlgError, match=r"Batch element 1"):
        metalcore.linalg.svdvals(bad.to(device))


@pytest.mark.parametrize("shape", [(5, 5), (7, 4), (4, 7)])
def test_gradient(device, shape):
    """The gradient of A through singular values and (sign-invariant
    functions of) the vectors, as PyTorch's; and through svdvals alone."""
    gen = torch.Generator().manual_seed(5)
    a = torch.randn(3, *shape, generator=gen, dtype=torch.float64)
    ours, ref = a.float().to(device).requires_grad_(), a.clone().requires_grad_()
    k = min(shape)
    g = torch.randn(*shape, generator=gen, dtype=torch.float64)

    def loss(u, s, vh):
        w = torch.arange(1, k + 1, dtype=s.dtype, device=s.device)
        return (s * w).sum() + ((u @ vh) * g.to(u)).sum() + (u * u * w).sum() + (vh * vh * w.unsqueeze(-1)).sum()

    loss(*metalcore.linalg.svd(ours)).backward()
    loss(*torch.linalg.svd(ref, full_matrices=False)).backward()
    close(ours.grad.cpu(), ref.grad, torch.float32, "dA", tol=1e-3)
    ours.grad = ref.grad = None
    metalcore.linalg.svdvals(ours).square().sum().backward()
    torch.linalg.svdvals(ref).square().sum().backward()
    close(ours.grad.cpu(), ref.grad, torch.float32, "dA through svdvals", tol=1e-3)


def test_pytorch_keeps_the_rest(device):
    """float64, full matrices of a non-square A and sizes past what
    metalcore takes are PyTorch's, counted; an empty batch and a
    non-contiguous A are metalcore's."""
    gen = torch.Generator().manual_seed(9)
    metalcore.reset_fallback_counts()
    metalcore.reset_call_counts()
    a64 = torch.randn(2, 5, 4, generator=gen, dtype=torch.float64).to(device)
    torch.testing.assert_close(metalcore.linalg.svdvals(a64), torch.linalg.svdvals(a64))
    big = torch.randn(2, 300, 270, generator=gen).to(device)
    torch.testing.assert_close(metalcore.linalg.svdvals(big), torch.linalg.svdvals(big), rtol=1e-4, atol=1e-3)
    full = metalcore.linalg.svd(a64.float(), full_matrices=True)
    assert full.U.shape == (2, 5, 5)
    fell = metalcore.fallback_counts()
    assert "dtype float64" in fell["svdvals"] and len(fell["svdvals"]) == 2, fell
    assert fell["svd"] == {"full_matrices for non-square matrices": 1}, fell
    assert metalcore.call_counts() == {}
    empty = metalcore.linalg.svd(torch.empty(0, 4, 3, device=device))
    assert empty.S.shape == (0, 3) and empty.U.shape == (0, 4, 3) and empty.Vh.shape == (0, 3, 3)
    a = torch.randn(3, 8, 6, generator=gen)
    u, s, vh = metalcore.linalg.svd(a.to(device).mT)
    check(u, s, vh, a.mT, torch.float32, "transposed view")


def test_overrides(device):
    """torch.linalg.svd and svdvals patched: batches are metalcore's
    (PyTorch's named tuple and error, full matrices of square ones), a
    single matrix, float64, out= and full matrices of a non-square batch
    PyTorch's, counted."""
    gen = torch.Generator().manual_seed(11)
    a = torch.randn(4, 12, 12, generator=gen).to(device)
    metalcore.reset_call_counts()
    metalcore.reset_fallback_counts()
    with metalcore.pytorch_overrides(ops=["svd"]):
        res = torch.linalg.svd(a)
        check(res.U, res.S, res.Vh, a, torch.float32, "override")
        close(torch.linalg.svdvals(a).cpu(), res.S.cpu(), torch.float32, "svdvals", tol=1e-5)
        assert metalcore.call_counts() == {"svd": 2}
        bad = a.clone()
        bad[2, 0, 0] = float("nan")
        with pytest.raises(torch.linalg.LinAlgError, match=r"Batch element 2"):
            torch.linalg.svd(bad)
        torch.linalg.svd(a.double())
        torch.linalg.svdvals(a, out=torch.empty(a.shape[:-1], device=device))
        torch.linalg.svd(a[0])
        torch.linalg.svd(a[:, :, :5])
        single = torch.randn(60, 48, generator=gen).to(device)  # the CPU's from min(m, n) = 48
        res = torch.linalg.svd(single, full_matrices=False)
        check(res.U, res.S, res.Vh, single, torch.float32, "single")
    fell = metalcore.fallback_counts()["svd"]
    assert fell.get("dtype float64") == 1 and fell.get("out=") == 1, fell
    assert fell.get("fewer than 2 matrices") == 1 + (device != "cpu"), fell
    assert fell.get("full_matrices for non-square matrices") == 1, fell
    assert metalcore.call_counts() == {"svd": 3 + (device == "cpu")}  # with the NaN batch
    assert torch.linalg.svd is metalcore.linalg._torch_svd
