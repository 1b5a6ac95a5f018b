"""The ops as torch.library custom ops (PyTorch 2.4 and later): opcheck on
each, and torch.compile(fullgraph=True) of a block using metalcore's
functions and modules, forward and backward, against eager."""
import pytest
import torch

import metalcore

pytestmark = pytest.mark.skipif(not metalcore._ops.CUSTOM_OPS,
                                reason=f"PyTorch {torch.__version__} has no torch.library.custom_op (2.4+)")


def samples(device):
    torch.manual_seed(0)
    x = torch.randn(3, 40, device=device)
    w, b = torch.randn(40, device=device), torch.randn(40, device=device)
    rstd = torch.rand(3, device=device) + 0.5
    mean = torch.randn(3, device=device)
    y = torch.softmax(x, -1)
    m = torch.randn(2, 5, 5, device=device)
    spd = m @ m.mT + torch.eye(5, device=device)
    ops = torch.ops.metalcore
    grad = lambda t: t.clone().requires_grad_()  # noqa: E731
    return [
        (ops.rms_norm, (grad(x), grad(w), 1e-6)), (ops.rms_norm, (grad(x), None, 1e-6)),
        (ops.layer_norm, (grad(x), grad(w), grad(b), 1e-5)), (ops.layer_norm, (grad(x), None, None, 1e-5)),
        (ops.softmax, (grad(x), False)), (ops.softmax, (grad(x.bfloat16()), True)), (ops.gelu, (grad(x), True)), (ops.gelu, (grad(x), False)), (ops.silu, (grad(x),)),
        (ops.fused_add_rms_norm, (x, x.clone(), w, 1e-6)),
        (ops.rms_norm_backward, (x.clone(), x, w, rstd, True)), (ops.rms_norm_backward, (x.clone(), x, None, rstd, False)),
        (ops.layer_norm_backward, (x.clone(), x, w, torch.stack([mean, rstd]), True, True)),
        (ops.softmax_backward, (x.clone(), y, torch.float32)),
        (ops.softmax_backward, (x.clone(), y, torch.bfloat16)), (ops.gelu_backward, (x.clone(), x, False)),
        (ops.silu_backward, (x.clone(), x)),
        (ops.glu, (grad(x), grad(x.flip(0)), 0)), (ops.glu, (grad(x), grad(x.flip(0)), 2)),
        (ops.glu_backward, (x.clone(), x, x.flip(0), 1)),
        (ops.rope, (grad(x.reshape(3, 1, 5, 8)), mean.new_ones(1, 5, 8), x[:1].reshape(1, 5, 8), False)),
        (ops.rope, (x.reshape(3, 2, 5, 4), x[:1].reshape(1, 5, 8)[..., :4], x[1:2].reshape(1, 5, 8)[..., :4], True)),
        (ops.cross_entropy, (grad(x), torch.tensor([3, -100, 39], device=device), -100, 0.1)),
        (ops.cross_entropy_backward, (x, torch.tensor([3, -100, 39], device=device), mean + 4, -100, 0.0, rstd)),
        (ops.linear_cross_entropy, (grad(x), grad(torch.randn(7, 40, device=device)), grad(torch.randn(7, device=device)),
                                    torch.tensor([3, -100, 6], device=device), -100, 0.1, True, 2, True, True, True)),
        (ops.linear_cross_entropy, (grad(x), grad(torch.randn(7, 40, device=device)), None,
                                    torch.tensor([3, 0, 6], device=device), -100, 0.0, False, 8, False, True, False)),
        (ops.qr, (torch.randn(4, 6, 5, device=device), "reduced")), (ops.qr, (torch.randn(6, 5, device=device), "r")),
        (ops.cholesky, (grad(spd), False)), (ops.cholesky, (spd[0], True)),
        (ops.solve, (grad(spd), grad(torch.randn(2, 5, 3, device=device)))), (ops.solve, (spd[0], x[:1, :5].mT.contiguous())),
        (ops.eigh, (grad(spd), False, True)), (ops.eigh, (spd, True, False)),
        (ops.svd, (grad(torch.randn(2, 6, 4, device=device)), True)), (ops.svd, (torch.randn(3, 4, 7, device=device), False)),
        (ops.adamw_step, ([x.clone()], [x.clone()], [torch.zeros_like(x)], [torch.zeros_like(x)], [], None, None,
                          1e-3, 0.9, 0.999, 1e-8, 0.01, 1, False, False)),
        (ops.adamw_step, ([x.clone()], [x.clone()], [torch.zeros_like(x)], [torch.zeros_like(x)], [],
                          torch.full((1,), 4.0, device=device), torch.zeros(1, device=device),
                          1e-3, 0.9, 0.999, 1e-8, 0.01, 1, False, False)),
    ]


def test_opcheck(device):
    for op, args in samples(device):
        torch.library.opcheck(op, args)


class Block(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm = metalcore.nn.RMSNorm(d)
        self.q, self.k, self.v, self.up = (torch.nn.Linear(d, d) for _ in range(4))

    def forward(self, x):
        h = self.norm(x)
        att = metalcore.softmax(self.q(h) @ self.k(h).transpose(-1, -2) / h.shape[-1] ** 0.5)
        h = x + att @ self.v(h)
        return h + metalcore.silu(self.up(metalcore.rms_norm(h, None, 1e-6)))


def test_compile_fullgraph_matches_eager(device):
    torch.manual_seed(0)
    block = Block(64).to(device)
    x = torch.randn(2, 16, 64, device=device, requires_grad=True)
    want = block(x)
    want.square().sum().backward()
    want_grads = [x.grad.clone()] + [p.grad.clone() for p in block.parameters()]
    x.grad = None
    block.zero_grad()
    compiled = torch.compile(block, fullgraph=True)
    got = compiled(x)
    got.square().sum().backward()
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    for g, w in zip([x.grad] + [p.grad for p in block.parameters()], want_grads):
        torch.testing.assert_close(g, w, rtol=1e-3, atol=1e-3)


def test_compile_swiglu_and_rope(device):
    """metalcore.swiglu and metalcore.rope under torch.compile(fullgraph=True)
    run the library's kernels (the custom ops), forward and backward, as
    eager computes them."""
    torch.manual_seed(0)
    gate, up = (torch.randn(3, 40, device=device, requires_grad=True) for _ in range(2))
    q = torch.randn(2, 5, 3, 8, device=device).transpose(1, 2).detach().requires_grad_()  # [B, H, T, D] as attention makes it
    k = torch.randn(2, 5, 1, 8, device=device).transpose(1, 2).detach().requires_grad_()
    cos, sin = torch.randn(2, 5, 8, device=device), torch.randn(2, 5, 8, device=device)

    def f(gate, up, q, k, cos, sin):
        qe, ke = metalcore.rope(q, k, cos, sin)
        return (metalcore.swiglu(gate, up) ** 2).sum() + (qe * ke).sum()

    want = f(gate, up, q, k, cos, sin)
    want_grads = torch.autograd.grad(want, (gate, up, q, k))
    compiled = torch.compile(f, fullgraph=True)
    metalcore.reset_call_counts()
    got = compiled(gate, up, q, k, cos, sin)
    got_grads = torch.autograd.grad(got, (gate, up, q, k))
    calls = metalcore.call_counts()
    assert calls.get("glu_fwd") == 1 and calls.get("glu_bwd") == 1 and calls.get("rope") == 4, calls
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    for g, w in zip(got_grads, want_grads):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_compile_cross_entropy(device, reduction):
    """metalcore.cross_entropy under torch.compile(fullgraph=True) runs the
    library's kernel forward and backward (the custom ops), as eager does."""
    torch.manual_seed(0)
    logits = torch.randn(6, 50, device=device, requires_grad=True)
    target = torch.tensor([1, -100, 49, 0, 7, 7], device=device)

    def f(logits, target):
        loss = metalcore.cross_entropy(logits, target, label_smoothing=0.1, reduction=reduction)
        return loss if reduction != "none" else (loss * torch.arange(6, device=loss.device)).sum()

    want = f(logits, target)
    (want_grad,) = torch.autograd.grad(want, logits)
    metalcore.reset_call_counts()
    got = torch.compile(f, fullgraph=True)(logits, target)
    (got_grad,) = torch.autograd.grad(got, logits)
    calls = metalcore.call_counts()
    assert calls.get("cross_entropy_fwd") == 1 and calls.get("cross_entropy_bwd") == 1, calls
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(got_grad, want_grad)


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_compile_linear_cross_entropy(device, reduction):
    """metalcore.linear_cross_entropy under torch.compile(fullgraph=True) is
    the custom op (chunks, the gradients made in the forward): the loss and
    the gradients of hidden, weight and bias as eager's."""
    torch.manual_seed(0)
    hidden = torch.randn(9, 16, device=device, requires_grad=True)
    weight = torch.randn(33, 16, device=device, requires_grad=True)
    bias = torch.randn(33, device=device, requires_grad=True)
    target = torch.tensor([1, -100, 32, 0, 7, 7, 5, -100, 2], device=device)

    def f(hidden, weight, bias, target):
        return metalcore.linear_cross_entropy(hidden, weight, target, bias, label_smoothing=0.1, reduction=reduction)

    want = f(hidden, weight, bias, target)
    want_grads = torch.autograd.grad(want, (hidden, weight, bias))
    metalcore.reset_call_counts()
    got = torch.compile(f, fullgraph=True)(hidden, weight, bias, target)
    got_grads = torch.autograd.grad(got, (hidden, weight, bias))
    assert metalcore.call_counts().get("cross_entropy", 0) >= 1, metalcore.call_counts()
    torch.testing.assert_close(got, want)
    for g, w in zip(got_grads, want_grads):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)


def test_compile_cholesky(device):
    """metalcore.linalg.cholesky_ex under torch.compile(fullgraph=True) is
    the custom op, forward and backward, as eager."""
    torch.manual_seed(0)
    m = torch.randn(3, 6, 6, device=device)
    a = (m @ m.mT + torch.eye(6, device=device)).requires_grad_()

    def f(a):
        l, info = metalcore.linalg.cholesky_ex(a, upper=True)
        return (l * l.detach().flip(-1)).sum() + info.sum()

    want = f(a)
    (want_grad,) = torch.autograd.grad(want, a)
    metalcore.reset_call_counts()
    got = torch.compile(f, fullgraph=True)(a)
    (got_grad,) = torch.autograd.grad(got, a)
    assert metalcore.call_counts().get("cholesky") == 1, metalcore.call_counts()
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(got_grad, want_grad)


def test_compile_eigh(device):
    """metalcore.linalg.eigh under torch.compile(fullgraph=True) is the
    custom op, forward and backward, as eager."""
    torch.manual_seed(0)
    b = torch.randn(3, 6, 6, device=device)
    a = (b + b.mT).requires_grad_()

    def f(a):
        w, v = metalcore.linalg.eigh(a)
        return (w * w).sum() + (v * v * v.detach().abs()).sum()

    want = f(a)
    want_grad = torch.autograd.grad(want, a)[0]
    metalcore.reset_call_counts()
    got = torch.compile(f, fullgraph=True)(a)
    got_grad = torch.autograd.grad(got, a)[0]
    assert metalcore.call_counts().get("eigh") == 1, metalcore.call_counts()
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(got_grad, want_grad, rtol=1e-4, atol=1e-4)


def test_compile_svd(device):
    """metalcore.linalg.svd under torch.compile(fullgraph=True) is the
    custom op, forward and backward, as eager."""
    torch.manual_seed(0)
    a = torch.randn(3, 7, 5, device=device).requires_grad_()

    def f(a):
        u, s, vh = metalcore.linalg.svd(a)
        return (s * s).sum() + ((u @ vh) * a.detach()).sum()

    want = f(a)
    want_grad = torch.autograd.grad(want, a)[0]
    metalcore.reset_call_counts()
    got = torch.compile(f, fullgraph=True)(a)
    got_grad = torch.autograd.grad(got, a)[0]
    assert metalcore.call_counts().get("svd") == 1, metalcore.call_counts()
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(got_grad, want_grad, rtol=1e-4, atol=1e-4)


def test_compile_solve(device):
    """metalcore.linalg.solve_ex under torch.compile(fullgraph=True) is the
    custom op, forward and backward (the gradients of A and B), as eager."""
    torch.manual_seed(0)
    a = (torch.randn(3, 6, 6, device=device) + 5 * torch.eye(6, device=device)).requires_grad_()
    b = torch.randn(3, 6, 2, device=device, requires_grad=True)

    def f(a, b):
        x, info = metalcore.linalg.solve_ex(a, b)
        return (x * x.detach().flip(-2)).sum() + info.sum()

    want = f(a, b)
    want_grads = torch.autograd.grad(want, (a, b))
    metalcore.reset_call_counts()
    got = torch.compile(f, fullgraph=True)(a, b)
    got_grads = torch.autograd.grad(got, (a, b))
    assert metalcore.call_counts().get("solve") == 2, metalcore.call_counts()  # forward, and B's gradient
    torch.testing.assert_close(got, want)
    for g, w in zip(got_grads, want_grads):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)
