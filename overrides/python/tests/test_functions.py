"""metalcore's functions against PyTorch's own, forward and backward."""
import pytest
import torch
import torch.nn.functional as F

import metalcore
from conftest import TOL, close

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
SHAPES = [(1, 1), (3, 7), (5, 33), (2, 3, 130), (4, 1030)]


def ref_rms(x, w, eps):
    xf = x.double()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return y * w.double() if w is not None else y


def leaves(device, dtype, shape, *scales):
    return [(torch.randn(*shape, dtype=torch.float64) * s).to(device, dtype).requires_grad_() for s in scales]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_rms_norm(device, dtype, shape):
    x, = leaves(device, dtype, shape, 2)
    w, = leaves(device, dtype, shape[-1:], 1)
    dy = torch.randn(*shape, device=device, dtype=dtype)
    y = metalcore.rms_norm(x, w, 1e-6)
    close(y, ref_rms(x.detach(), w.detach(), 1e-6), dtype, "y")
    if shape[-1] == 1:
        return  # dx cancels to ~0 there; the Go suite checks it against the terms' scale
    gx, gw = torch.autograd.grad(y, (x, w), dy)
    xd, wd = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    rx, rw = torch.autograd.grad(ref_rms(xd, wd, 1e-6), (xd, wd), dy.double())
    close(gx, rx, dtype, "dx")
    close(gw, rw, dtype, "dweight")


@pytest.mark.parametrize("dtype", DTYPES)
def test_fused_add_rms_norm(device, dtype):
    x, r = (torch.randn(6, 100, device=device, dtype=dtype) for _ in range(2))
    w = torch.randn(100, device=device, dtype=dtype)
    y, out = metalcore.fused_add_rms_norm(x, r, w, 1e-6)
    s = x + r
    assert torch.equal(out, s)
    close(y, ref_rms(s, w, 1e-6), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_layer_norm(device, dtype, shape):
    x, = leaves(device, dtype, shape, 2)
    w, b = leaves(device, dtype, shape[-1:], 1, 1)
    dy = torch.randn(*shape, device=device, dtype=dtype)
    y = metalcore.layer_norm(x, w, b, 1e-5)
    xd, wd, bd = (t.detach().double().requires_grad_() for t in (x, w, b))
    ref = F.layer_norm(xd, shape[-1:], wd, bd, 1e-5)
    close(y, ref, dtype, "y")
    if shape[-1] == 1:
        return  # as in test_rms_norm
    got = torch.autograd.grad(y, (x, w, b), dy)
    want = torch.autograd.grad(ref, (xd, wd, bd), dy.double())
    for g, r, what in zip(got, want, ("dx", "dweight", "dbias")):
        close(g, r, dtype, what)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("op", ["softmax", "gelu", "gelu_tanh", "silu"])
def test_pointwise_and_softmax(device, dtype, shape, op):
    x, = leaves(device, dtype, shape, 3)
    dy = torch.randn(*shape, device=device, dtype=dtype)
    ours = {"softmax": lambda t: metalcore.softmax(t, -1), "gelu": metalcore.gelu,
            "gelu_tanh": lambda t: metalcore.gelu(t, "tanh"), "silu": metalcore.silu}[op]
    theirs = {"softmax": lambda t: torch.softmax(t, -1), "gelu": F.gelu,
              "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"), "silu": F.silu}[op]
    y = ours(x)
    xd = x.detach().double().requires_grad_()
    ref = theirs(xd)
    # float32 GELU on the CPU: the erf approximation's absolute error (7e-8)
    # dominates when a one-element result is near zero
    tol = 5e-4 if dtype == torch.float32 and op == "gelu" else None
    close(y, ref, dtype, "y", tol)
    dx = torch.autograd.grad(y, x, dy)[0]
    if op == "softmax":
        # dx = y * (dy - sum(dy * y)) cancels, so the rounding of a 16-bit y
        # (the backward's input) can decide its relative error: the
        # reference backward takes the same y, in float64
        yd, dyd = y.detach().double(), dy.double()
        want = yd * (dyd - (dyd * yd).sum(-1, keepdim=True))
    else:
        want = torch.autograd.grad(ref, xd, dy.double())[0]
    close(dx, want, dtype, "dx", tol)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", SHAPES)
def test_softmax_upcast_gradient(device, dtype, shape):
    """softmax(x, dtype=float32) of a 16-bit x: a float32 result, and x's
    gradient in x's dtype written by the backward kernel itself (one
    library call, no cast after it), as PyTorch's backward of the upcast."""
    x, = leaves(device, dtype, shape, 3)
    y = metalcore.softmax(x, -1, dtype=torch.float32)
    assert y.dtype == torch.float32
    close(y, torch.softmax(x.detach().double(), -1), torch.float32, "y")
    dy = torch.randn(*shape, device=device)
    metalcore.reset_call_counts()
    dx = torch.autograd.grad(y, x, dy)[0]
    assert dx.dtype == dtype and metalcore.call_counts().get("softmax_bwd") == 1
    yd, dyd = y.detach().double(), dy.double()
    close(dx, yd * (dyd - (dyd * yd).sum(-1, keepdim=True)), dtype, "dx")


def test_module(device):
    m = metalcore.nn.RMSNorm(64, eps=1e-6, device=device)
    x = torch.randn(3, 64, device=device)
    close(m(x), ref_rms(x, m.weight.detach(), 1e-6), torch.float32)
    m(x.double()).sum().backward()  # float64: PyTorch's arithmetic
    assert m.weight.grad is not None


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_module_default_eps_is_the_dtypes_epsilon(device, dtype):
    """RMSNorm and FusedAddRMSNorm with eps=None normalize with the input
    dtype's epsilon (torch.nn.RMSNorm's default), on rows small enough for
    it to matter (mean square about eps): float64 is PyTorch's arithmetic,
    in float64 as PyTorch's own, the others metalcore's; torch.jit.script's
    module (PyTorch's ops) agrees."""
    m = metalcore.nn.RMSNorm(64, device=device, dtype=dtype)
    fused = metalcore.nn.FusedAddRMSNorm(64, device=device, dtype=dtype)
    eps = torch.finfo(dtype).eps
    x = (torch.randn(5, 64, device=device, dtype=torch.float64) * eps ** 0.5).to(dtype)
    want = ref_rms(x, m.weight.detach(), eps)
    assert (ref_rms(x, None, 2 * eps) - want).abs().max() > 0.1 * want.abs().max()  # eps matters here
    tol = 1e-12 if dtype == torch.float64 else None
    with torch.no_grad():
        close(m(x), want, dtype, "rms_norm", tol)
        close(torch.jit.script(m)(x), want, dtype, "rms_norm under torch.jit.script", tol)
        y, total = fused(x, torch.zeros_like(x))
    close(y, want, dtype, "fused_add_rms_norm", tol)
    assert torch.equal(total, x)


def test_unsupported_input_is_refused_saying_why():
    with pytest.raises(ValueError, match="unsupported input: dtype float64"):
        metalcore.silu(torch.randn(4, 4, dtype=torch.float64))
    with pytest.raises(ValueError, match="dim other than the last"):
        metalcore.softmax(torch.randn(4, 4), dim=0)
    with pytest.raises(ValueError, match="0-d"):
        metalcore.gelu(torch.tensor(1.0))
    with pytest.raises(ValueError, match="approximate='sigmoid'"):
        metalcore.gelu(torch.randn(4), approximate="sigmoid")
    with pytest.raises(ValueError, match="more than 32 dimensions"):
        metalcore.silu(torch.randn([1] * 33))
    with pytest.raises(ValueError, match="normalized_shape"):
        metalcore.layer_norm(torch.randn(4, 8), (4, 8))
    with pytest.raises(ValueError, match="eps inf"):
        metalcore.layer_norm(torch.randn(4, 8), eps=float("inf"))


def test_layer_norm_takes_torchs_form():
    """layer_norm(x, normalized_shape, weight, bias, eps), as F.layer_norm."""
    x, w, b = torch.randn(5, 8), torch.randn(8), torch.randn(8)
    want = F.layer_norm(x, (8,), w, b, 1e-3)
    for got in (metalcore.layer_norm(x, (8,), w, b, 1e-3), metalcore.layer_norm(x, 8, w, b, eps=1e-3),
                metalcore.layer_norm(x, normalized_shape=[8], weight=w, bias=b, eps=1e-3),
                metalcore.layer_norm(x, w, b, 1e-3)):
        torch.testing.assert_close(got, want)


def test_library_errors_surface():
    x = torch.randn(4, 8)
    with pytest.raises(metalcore.MetalcoreError, match="weight"):
        metalcore.rms_norm(x, torch.randn(7))


def test_backends_lists_cpu():
    assert "cpu" in metalcore.backends()
    if not torch.cuda.is_available():
        assert metalcore.backends() == ["cpu"]


@pytest.mark.parametrize("call", ["rms_norm", "layer_norm", "softmax", "gelu", "silu"])
def test_eager_calls_run_on_the_current_stream(call):
    """A call on a side stream waits for that stream's earlier work, also
    when its tensors' forms were first seen on the default stream (their
    Forms keep a getter of the current stream, not a stream)."""
    if "cuda" not in metalcore.backends():
        pytest.skip("no metalcore cuda backend on this machine")
    fn = {"rms_norm": lambda t: metalcore.rms_norm(t, None), "layer_norm": lambda t: metalcore.layer_norm(t),
          "softmax": metalcore.softmax, "gelu": metalcore.gelu, "silu": metalcore.silu}[call]
    src = torch.randn(256, 1024, device="cuda")
    x = torch.full_like(src, float("nan"))
    fn(x)  # forms seen on the default stream
    want = fn(src)
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.cuda._sleep(50_000_000)  # tens of milliseconds of the side stream's work before the copy
        x.copy_(src)
        got = fn(x)
    side.synchronize()
    assert torch.equal(got, want)
