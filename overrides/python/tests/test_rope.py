"""metalcore.rope against Hugging Face's apply_rotary_pos_emb (rotate_half
form) on every backend and dtype: q and k as models make them (transposed
views), cos and sin per batch or broadcast, gradients of q and k."""
import pytest
import torch

import metalcore
from conftest import TOL, close


def rotate_half(x):
    x1, x2 = x.chunk(2, -1)
    return torch.cat((-x2, x1), -1)


def hf_rope(q, k, cos, sin):
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", [(1, 1, 1, 2), (2, 4, 7, 64), (3, 2, 5, 130)])
@pytest.mark.parametrize("layout", ["transposed", "contiguous", "broadcast cos"])
def test_matches_hugging_face(device, dtype, shape, layout):
    b, h, t, d = shape
    gen = torch.Generator().manual_seed(b * 1000 + d)
    if layout == "transposed":  # [B, T, H, D] -> [B, H, T, D], as attention layers make q and k
        q = torch.randn(b, t, h, d, generator=gen).transpose(1, 2)
        k = torch.randn(b, t, 1, d, generator=gen).transpose(1, 2)
    else:
        q, k = torch.randn(b, h, t, d, generator=gen), torch.randn(b, 1, t, d, generator=gen)
    pos = torch.arange(t, dtype=torch.float32)[None, :, None] * torch.rand(1, 1, d // 2, generator=gen)
    emb = torch.cat((pos, pos), -1).expand(1 if layout == "broadcast cos" else b, t, d)
    cos, sin = emb.cos(), emb.sin()
    q, k, cos, sin = (x.to(device=device, dtype=dtype) for x in (q, k, cos, sin))
    qo, ko = q.detach().clone().requires_grad_(), k.detach().clone().requires_grad_()
    qr, kr = q.detach().float().requires_grad_(), k.detach().float().requires_grad_()
    metalcore.reset_call_counts()
    got = metalcore.rope(qo, ko, cos, sin)
    want = hf_rope(qr, kr, cos.float(), sin.float())
    assert metalcore.call_counts() == {"rope": 2}
    for g, w in zip(got, want):
        assert g.dtype == dtype and g.shape == w.shape
        close(g.float(), w, dtype, "rope")
    dq, dk = torch.randn(want[0].shape, generator=gen), torch.randn(want[1].shape, generator=gen)
    torch.autograd.backward(got, (dq.to(device, dtype), dk.to(device, dtype)))
    torch.autograd.backward(want, (dq.to(device), dk.to(device)))
    close(qo.grad.float(), qr.grad, dtype, "dq")
    close(ko.grad.float(), kr.grad, dtype, "dk")


def test_pytorch_computes_the_rest():
    q, k = torch.randn(1, 2, 3, 8), torch.randn(1, 2, 3, 8)
    cos, sin = torch.randn(1, 3, 8), torch.randn(1, 3, 8)
    for args in ((q.double(), k.double(), cos.double(), sin.double()), (q[..., :7], k[..., :7], cos[..., :7], sin[..., :7]),
                 (q, k, cos.requires_grad_(), sin)):
        metalcore.reset_fallback_counts()
        for g, w in zip(metalcore.rope(*args), hf_rope(*args)):
            torch.testing.assert_close(g, w)
        assert "rope" in metalcore.fallback_counts()


def test_expanded_gradient(device):
    """A loss's sum() hands backward an expanded gradient (stride 0): the
    gradients of q and k still match Hugging Face's."""
    gen = torch.Generator().manual_seed(7)
    q = torch.randn(2, 3, 5, 8, generator=gen).to(device).requires_grad_()
    k = torch.randn(2, 1, 5, 8, generator=gen).to(device).requires_grad_()
    cos, sin = (torch.randn(2, 5, 8, generator=gen).to(device) for _ in range(2))
    got = torch.autograd.grad(sum(t.sum() for t in metalcore.rope(q, k, cos, sin)), (q, k))
    want = torch.autograd.grad(sum(t.sum() for t in hf_rope(q, k, cos, sin)), (q, k))
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)


def test_layouts(device):
    """The outputs keep the inputs' layout (a transposed view's, as PyTorch's
    expression does) and so do the gradients: a model's
    transpose(1, 2).reshape of them is a view, not a copy."""
    gen = torch.Generator().manual_seed(4)
    q, k = (torch.randn(2, 6, 3, 8, generator=gen).to(device).transpose(1, 2).requires_grad_() for _ in range(2))
    emb = torch.randn(2, 6, 8, generator=gen).to(device)
    qe, ke = metalcore.rope(q, k, emb.cos(), emb.sin())
    assert qe.stride() == q.stride() and ke.stride() == k.stride()
    (qe.sum() + (ke * 2).sum()).backward()
    for t in (q, k):
        assert t.grad.stride() == t.stride()
