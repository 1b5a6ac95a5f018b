"""metalcore.cross_entropy against F.cross_entropy: every reduction, label
smoothing, ignored rows (all of them: PyTorch's nan), odd and large
vocabularies, one row, 16-bit logits, gradients; and the calls that are
PyTorch's own."""
import pytest
import torch
import torch.nn.functional as F

import metalcore
from conftest import TOL, close

SHAPES = [(1, 1), (1, 7), (5, 33), (3, 1031), (2, 32003), (64, 96)]


def _targets(n, v, gen, ignored=True):
    t = torch.randint(0, v, (n,), generator=gen)
    if ignored:
        t[1::4] = -100
    return t


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_matches_pytorch(device, dtype, shape, reduction, smoothing):
    gen = torch.Generator().manual_seed(sum(shape))
    n, v = shape
    x = (torch.randn(n, v, generator=gen) * 3).to(device=device, dtype=dtype)
    t = _targets(n, v, gen).to(device)
    ours_x, ref_x = x.clone().requires_grad_(), x.float().clone().requires_grad_()
    metalcore.reset_call_counts()
    got = metalcore.cross_entropy(ours_x, t, label_smoothing=smoothing, reduction=reduction)
    want = F.cross_entropy(ref_x, t, label_smoothing=smoothing, reduction=reduction)
    # a scalar loss's gradient comes with it, scaled in the backward; a loss
    # per row keeps each row's log-sum-exp for a backward pass of its own
    forward, backward = (("cross_entropy_fwd", "cross_entropy_bwd") if reduction == "none" else
                         ("cross_entropy", "loss_grad_scale"))
    assert metalcore.call_counts() == {forward: 1} and got.dtype == dtype and got.shape == want.shape
    if torch.isnan(want).any():  # every row ignored: PyTorch's mean is nan
        assert torch.isnan(got).all()
        return
    close(got.float(), want, dtype, "loss", tol=max(TOL[dtype], 1e-5))
    dy = (torch.randn(want.shape, generator=gen) if reduction == "none" else torch.tensor(0.7)).to(device)
    got.backward(dy.to(dtype))
    want.backward(dy)
    assert metalcore.call_counts() == {forward: 1, backward: 1}
    assert ours_x.grad.dtype == dtype
    close(ours_x.grad.float(), ref_x.grad, dtype, "dlogits")


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_gradient_scaled_by_each_backward(device, reduction):
    """loss.backward() (a gradient of 1: nothing rescaled), then a graph kept
    and run backward again with other gradients: each matches PyTorch's."""
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(6, 40, generator=gen).to(device)
    t = _targets(6, 40, gen).to(device)
    ours_x, ref_x = x.clone().requires_grad_(), x.clone().requires_grad_()
    got = metalcore.cross_entropy(ours_x, t, reduction=reduction)
    want = F.cross_entropy(ref_x, t, reduction=reduction)
    for dy in (None, 2.5, -0.5, 1.0):
        for loss, leaf in ((got, ours_x), (want, ref_x)):
            leaf.grad = None
            loss.backward(None if dy is None else torch.tensor(dy, device=device), retain_graph=True)
        torch.testing.assert_close(ours_x.grad, ref_x.grad, msg=f"gradient {dy}")


def test_all_ignored_and_one_dimensional():
    x = torch.randn(4, 9, requires_grad=True)
    t = torch.full((4,), -100)
    for reduction in ("mean", "sum", "none"):
        got, want = metalcore.cross_entropy(x, t, reduction=reduction), F.cross_entropy(x, t, reduction=reduction)
        torch.testing.assert_close(got, want, equal_nan=True)
    metalcore.cross_entropy(x, t, reduction="sum").backward()
    assert torch.equal(x.grad, torch.zeros_like(x))
    v, c = torch.randn(11), torch.tensor(3)
    for reduction in ("mean", "none"):
        torch.testing.assert_close(metalcore.cross_entropy(v, c, reduction=reduction),
                                   F.cross_entropy(v, c, reduction=reduction))


def test_non_contiguous_logits_and_other_ignore_index():
    x = torch.randn(12, 6).t()  # [6, 12], strided
    t = torch.tensor([0, 11, 5, 7, 7, 2])
    metalcore.reset_call_counts()
    torch.testing.assert_close(metalcore.cross_entropy(x, t, ignore_index=7), F.cross_entropy(x, t, ignore_index=7))
    assert metalcore.call_counts() == {"cross_entropy": 1}


def test_no_gradient_wanted():
    x, t = torch.randn(8, 50), torch.randint(0, 50, (8,))
    with torch.no_grad():
        got = metalcore.cross_entropy(x.requires_grad_(), t, label_smoothing=0.2)
    assert not got.requires_grad
    torch.testing.assert_close(got, F.cross_entropy(x, t, label_smoothing=0.2))


@pytest.mark.parametrize("case", ["float64", "3-d logits", "probabilities", "int32 target", "bad reduction"])
def test_pytorch_computes_the_rest(case):
    x, t = torch.randn(4, 5), torch.randint(0, 5, (4,))
    kw = {}
    if case == "float64":
        x = x.double()
    elif case == "3-d logits":
        x, t = torch.randn(2, 5, 3), torch.randint(0, 5, (2, 3))
    elif case == "probabilities":
        t = torch.softmax(torch.randn(4, 5), -1)
    elif case == "int32 target":
        t = t.int()
    metalcore.reset_fallback_counts()
    metalcore.reset_call_counts()
    if case == "bad reduction":
        with pytest.raises(ValueError):
            F.cross_entropy(x, t, reduction="avg")
        with pytest.raises(ValueError):
            metalcore.cross_entropy(x, t, reduction="avg")
        return
    try:
        want = F.cross_entropy(x, t, **kw)
    except RuntimeError as e:  # this PyTorch refuses it too
        with pytest.raises(type(e)):
            metalcore.cross_entropy(x, t, **kw)
        return
    torch.testing.assert_close(metalcore.cross_entropy(x, t, **kw), want)
    assert metalcore.call_counts() == {} and "cross_entropy" in metalcore.fallback_counts()


def test_target_out_of_range_raises():
    with pytest.raises(metalcore.MetalcoreError, match="target 5 of row 1"):
        metalcore.cross_entropy(torch.randn(3, 5), torch.tensor([0, 5, 1]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("chunks", ["one", "many"])
def test_linear_cross_entropy_matches_pytorch(device, dtype, bias, reduction, chunks, monkeypatch):
    if chunks == "many":  # chunks of a few rows, the last one short
        monkeypatch.setattr(metalcore.losses, "_CHUNK_FLOOR", 0)
        monkeypatch.setattr(metalcore.losses, "_CHUNK_SHARE", 0.05)
    gen = torch.Generator().manual_seed(7)
    h = torch.randn(74, 48, generator=gen).to(device=device, dtype=dtype)
    w = (torch.randn(1003, 48, generator=gen) / 7).to(device=device, dtype=dtype)
    b = torch.randn(1003, generator=gen).to(device=device, dtype=dtype) if bias else None
    t = _targets(74, 1003, gen).to(device)
    ours = [x.clone().requires_grad_() if x is not None else None for x in (h, w, b)]
    ref = [x.clone().requires_grad_() if x is not None else None for x in (h, w, b)]
    metalcore.reset_call_counts()
    got = metalcore.linear_cross_entropy(ours[0], ours[1], t, ours[2], label_smoothing=0.1, reduction=reduction)
    want = F.cross_entropy(F.linear(*ref[:2], ref[2]).float(), t, label_smoothing=0.1, reduction=reduction)
    calls = metalcore.call_counts()["cross_entropy"]
    assert got.dtype == torch.float32 and (calls == 1) == (chunks == "one") and calls >= 1
    close(got, want, torch.float32, "loss", tol=1e-5 if dtype == torch.float32 else 2e-3)
    got.backward(torch.tensor(1.3, device=device))
    want.backward(torch.tensor(1.3, device=device))
    for name, o, r in zip(("dhidden", "dweight", "dbias"), ours, ref):
        if o is not None:
            close(o.grad.float(), r.grad.float(), dtype, name, tol=None if dtype == torch.float32 else 3e-2)


def test_linear_cross_entropy_without_gradients_and_fallbacks():
    gen = torch.Generator().manual_seed(3)
    h, w, t = torch.randn(9, 16, generator=gen), torch.randn(50, 16, generator=gen), torch.randint(0, 50, (9,))
    want = F.cross_entropy(F.linear(h, w).float(), t, reduction="none")
    torch.testing.assert_close(metalcore.linear_cross_entropy(h, w, t, reduction="none"), want)
    hb, wb = h.bfloat16(), w.bfloat16()  # float32 losses of the bfloat16 logits
    got = metalcore.linear_cross_entropy(hb, wb, t, reduction="none")
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, F.cross_entropy(F.linear(hb, wb).float(), t, reduction="none"))
    metalcore.reset_fallback_counts()
    hg = h.clone().requires_grad_()  # 'none' with a gradient: PyTorch's, counted
    torch.testing.assert_close(metalcore.linear_cross_entropy(hg, w, t, reduction="none"), want)
    assert "linear_cross_entropy" in metalcore.fallback_counts()
    torch.testing.assert_close(metalcore.linear_cross_entropy(h.double(), w.double(), t),
                               F.cross_entropy(F.linear(h.double(), w.double()).float(), t))
