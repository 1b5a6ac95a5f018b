"""Patching torch.nn.functional: identity, fallbacks, and a model trained with
and without the overrides."""
import re

import pytest
import torch
import torch.nn.functional as F

import metalcore

from conftest import ORIGINALS, SMALL_CUDA_BYTES

pytestmark = pytest.mark.usefixtures("restore_overrides")


def test_enable_disable_identity():
    metalcore.enable_pytorch_overrides()
    metalcore.enable_pytorch_overrides()  # idempotent
    assert F.softmax is not ORIGINALS["softmax"]
    metalcore.disable_pytorch_overrides()
    metalcore.disable_pytorch_overrides()
    for name, fn in ORIGINALS.items():
        assert getattr(F, name) is fn


def test_context_manager_and_op_selection():
    with metalcore.pytorch_overrides(ops=["silu"]):
        assert F.silu is not ORIGINALS["silu"]
        assert F.gelu is ORIGINALS["gelu"]
    assert F.silu is ORIGINALS["silu"]


class Spy:
    """Wraps an original to count calls that reach it."""
    def __init__(self, fn):
        self.fn, self.calls = fn, 0

    def __call__(self, *a, **k):
        self.calls += 1
        return self.fn(*a, **k)


@pytest.mark.parametrize("name,call", [
    ("silu", lambda: F.silu(torch.randn(4, 4, dtype=torch.float64))),          # dtype
    ("silu", lambda: F.silu(torch.randn(4, 4), inplace=True)),                  # in place
    ("silu", lambda: F.silu(torch.randn(8, 4).t())),                            # non-contiguous
    ("gelu", lambda: F.gelu(torch.randint(0, 3, (4,)).float().t().double())),   # float64
    ("softmax", lambda: F.softmax(torch.randn(4, 5), dim=0)),                   # other dim
    ("softmax", lambda: F.softmax(torch.randn(4, 5), dim=-1, dtype=torch.float64)),  # dtype=
    ("layer_norm", lambda: F.layer_norm(torch.randn(2, 3, 4), (3, 4))),         # 2-D normalized
    ("layer_norm", lambda: F.layer_norm(torch.randn(2, 4), (4,), torch.randn(4, dtype=torch.float64))),  # mixed
])
def test_fallbacks_reach_the_original(name, call):
    spy = Spy(ORIGINALS[name])
    setattr(F, name, spy)
    try:
        metalcore.enable_pytorch_overrides(ops=[name])
        try:
            call()
        except RuntimeError:
            pass  # PyTorch's own error for PyTorch's own inputs
        assert spy.calls == 1
    finally:
        metalcore.disable_pytorch_overrides()
        setattr(F, name, ORIGINALS[name])


def test_errors_are_pytorchs():
    metalcore.enable_pytorch_overrides()
    with pytest.raises(RuntimeError):
        F.layer_norm(torch.randn(2, 4), (4,), torch.randn(5))  # wrong weight size: from PyTorch or metalcore
    with pytest.raises(Exception) as mine:
        F.softmax(torch.randn(2, 3), dim=5)
    with pytest.raises(type(mine.value)):
        ORIGINALS["softmax"](torch.randn(2, 3), dim=5)
    if hasattr(F, "rms_norm"):  # eps=None on an integer input: PyTorch's refusal, not finfo's
        ints = torch.ones(2, 4, dtype=torch.int64)
        with metalcore.pytorch_overrides(ops=["rms_norm"]), pytest.raises(Exception) as mine:
            F.rms_norm(ints, (4,))
        with pytest.raises(type(mine.value), match=re.escape(str(mine.value))):
            metalcore._overrides._PYTORCH["rms_norm"](ints, (4,))


@pytest.mark.parametrize("weight_rows", [5, 4])
def test_weight_fit_is_asked_per_form(weight_rows):
    """The overrides remember whether a weight fits with the tensors' forms:
    after fitting calls a misfit weight still falls back every time (and
    PyTorch raises), and after misfit calls a fitting one is metalcore's."""
    metalcore.enable_pytorch_overrides(ops=["layer_norm", "rms_norm"])
    try:
        metalcore.reset_fallback_counts()
        metalcore.reset_call_counts()
        x = torch.randn(2, 4)
        first, then = (torch.randn(weight_rows), torch.randn(9 - weight_rows))
        for w in (first, first, then, then):
            if w.shape[0] == 4:
                ref = ORIGINALS["layer_norm"](x, (4,), w, torch.zeros(4))
                torch.testing.assert_close(F.layer_norm(x, (4,), w, torch.zeros(4)), ref)
            else:
                with pytest.raises(RuntimeError):
                    F.layer_norm(x, (4,), w, torch.zeros(4))
        assert metalcore.fallback_counts()["layer_norm"] == {"a weight or bias of shape [5] for rows of 4": 2}
        assert metalcore.call_counts()["layernorm_fwd"] == 2
    finally:
        metalcore.disable_pytorch_overrides()


class Tiny(torch.nn.Module):
    """embedding -> RMSNorm -> Linear -> GELU -> softmax attention -> logits"""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(50, 32)
        self.norm = torch.nn.LayerNorm(32)
        self.lin = torch.nn.Linear(32, 32)
        self.out = torch.nn.Linear(32, 50)

    def forward(self, idx):
        h = self.norm(self.emb(idx))
        h = F.gelu(self.lin(h))
        att = F.softmax(h @ h.transpose(-1, -2) / 32 ** 0.5, dim=-1)
        h = F.silu(att @ h) + h
        return self.out(h)


def train(overrides):
    torch.manual_seed(0)
    model = Tiny()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.randint(0, 50, (8, 12))
    losses = []
    with metalcore.pytorch_overrides() if overrides else _null():
        for _ in range(20):
            loss = F.cross_entropy(model(data).reshape(-1, 50), data.reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
    return losses


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def test_small_model_trains_the_same():
    plain, patched = train(False), train(True)
    assert plain[-1] < plain[0]
    for a, b in zip(plain, patched):
        assert abs(a - b) <= 1e-4 * max(1, abs(a)), (plain, patched)


def test_gradcheck_through_the_patched_functions():
    """float64 falls back to PyTorch, so the patched functions stay
    differentiable exactly as PyTorch's own."""
    x = torch.randn(3, 6, dtype=torch.float64, requires_grad=True)
    w = torch.randn(6, dtype=torch.float64, requires_grad=True)
    with metalcore.pytorch_overrides(ops=list(metalcore.ALL)):
        assert torch.autograd.gradcheck(lambda t: F.softmax(t, dim=-1), (x,))
        assert torch.autograd.gradcheck(lambda t: F.gelu(t, approximate="tanh"), (x,))
        assert torch.autograd.gradcheck(F.silu, (x,))
        assert torch.autograd.gradcheck(lambda t, g: F.layer_norm(t, (6,), g), (x, w))


def test_cpu_defaults():
    """The default overrides on the CPU: rms_norm (where PyTorch has
    F.rms_norm) in float32 and bfloat16, bfloat16 layer_norm and silu on
    PyTorch 1.x only, never gelu, softmax or float32 activations."""
    from metalcore import _lib
    pytorch_1 = torch.__version__.split(".")[0] == "1"
    x = torch.randn(4, 64)
    calls = [("gelu_fwd", lambda x: F.gelu(x), {torch.float32: False, torch.bfloat16: False}),
             ("softmax_fwd", lambda x: F.softmax(x, -1), {torch.float32: False, torch.bfloat16: False}),
             ("silu_fwd", lambda x: F.silu(x), {torch.float32: False, torch.bfloat16: pytorch_1}),
             ("layernorm_fwd", lambda x: F.layer_norm(x, (64,)), {torch.float32: False, torch.bfloat16: pytorch_1})]
    if hasattr(F, "rms_norm"):
        calls.append(("rmsnorm_fwd", lambda x: F.rms_norm(x, (64,)), {torch.float32: True, torch.bfloat16: True}))
    with metalcore.pytorch_overrides():
        for kernel, call, ours in calls:
            for dtype, want in ours.items():
                metalcore.reset_call_counts()
                call(x.to(dtype))
                assert _lib.CALLS[kernel] == int(want), (kernel, dtype, dict(_lib.CALLS))


def test_selection_changes_reach_a_patched_function():
    """A function that stays patched while its selection changes (the
    defaults turn softmax on for CUDA only) follows each change: its
    remembered answer for a device and dtype is the selection's in force."""
    from metalcore import _lib
    x = torch.randn(4, 8)
    want = ORIGINALS["softmax"](x, -1)  # (it calls Tensor.softmax, which the overrides patch too)
    reason = ("softmax", "not enabled for cpu float32")
    metalcore.enable_pytorch_overrides()
    metalcore.reset_fallback_counts()
    steps = []
    for selection in ("defaults", "all", "defaults", "all"):
        calls, fell = _lib.CALLS["softmax_fwd"], _lib.FALLBACKS[reason]
        if selection == "all":
            with metalcore.pytorch_overrides(ops=["softmax"]):
                torch.testing.assert_close(F.softmax(x, -1), want)
        else:
            assert F.softmax is not ORIGINALS["softmax"]
            torch.testing.assert_close(F.softmax(x, -1), want)
        steps.append((_lib.CALLS["softmax_fwd"] - calls, _lib.FALLBACKS[reason] - fell))
    assert steps == [(0, 1), (1, 0), (0, 1), (1, 0)]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_small_cuda_inputs_stay_pytorchs(device, dtype, monkeypatch):
    """On CUDA an input below SMALL_CUDA_BYTES goes to PyTorch's own op (its
    exact result, counted as a fallback); one of that size goes to
    metalcore. On the CPU size does not matter."""
    from metalcore import _lib
    monkeypatch.setattr(metalcore._overrides, "SMALL_CUDA_BYTES", SMALL_CUDA_BYTES)
    at = SMALL_CUDA_BYTES // torch.tensor([], dtype=dtype).element_size() // 1024
    small, big = (torch.randn(rows, 1024, device=device, dtype=dtype) for rows in (at - 1, at))
    w = torch.randn(1024, device=device, dtype=dtype)
    calls = [("softmax_fwd", "softmax", lambda x: F.softmax(x, -1)),
             ("softmax_fwd", "softmax", lambda x: x.softmax(-1)),
             ("gelu_fwd", "gelu", lambda x: F.gelu(x)), ("silu_fwd", "silu", lambda x: F.silu(x)),
             ("layernorm_fwd", "layer_norm", lambda x: F.layer_norm(x, (1024,), w))]
    if hasattr(F, "rms_norm"):
        calls.append(("rmsnorm_fwd", "rms_norm", lambda x: F.rms_norm(x, (1024,), w)))
    reason = "a small CUDA input (launch-bound: PyTorch's op costs less host time)"
    with metalcore.pytorch_overrides(ops=["softmax", "gelu", "silu", "layer_norm", "rms_norm"]):
        for kernel, op, call in calls:
            metalcore.reset_call_counts()
            metalcore.reset_fallback_counts()
            got = call(small)
            with metalcore.pytorch_overrides(ops=[]):
                want = call(small)
            fell = metalcore.fallback_counts().get(op, {})
            if device == "cuda":
                torch.testing.assert_close(got, want, rtol=0, atol=0)
                assert _lib.CALLS[kernel] == 0 and fell == {reason: 1}, (op, dict(_lib.CALLS), fell)
            else:
                assert _lib.CALLS[kernel] == 1 and not fell, (op, dict(_lib.CALLS), fell)
            call(big)
            assert _lib.CALLS[kernel] == (1 if device == "cuda" else 2), (op, dict(_lib.CALLS))


@pytest.mark.parametrize("call", ["F.softmax", "torch.softmax", "Tensor.softmax"])
def test_short_cuda_softmax_rows_stay_pytorchs(device, call):
    """On CUDA a softmax over short rows goes to PyTorch's own op (its exact
    result, counted as a fallback) where PyTorch's is the faster: rows that
    the short-rows kernels take (up to SHORT_KERNEL_ROW_BYTES) past
    FAST_SHORT_ROW_BYTES with no gradient wanted; longer rows shorter than
    SHORTER_CUDA_SOFTMAX_ROW, or shorter than SHORT_CUDA_SOFTMAX_ROW with no
    gradient wanted. Every side of each bound is checked, in bfloat16 and
    float32; on the CPU row length does not matter."""
    from metalcore import _lib, _overrides
    fn = {"F.softmax": lambda x: F.softmax(x, -1), "torch.softmax": lambda x: torch.softmax(x, -1),
          "Tensor.softmax": lambda x: x.softmax(-1)}[call]
    short, shorter = _overrides.SHORT_CUDA_SOFTMAX_ROW, _overrides.SHORTER_CUDA_SOFTMAX_ROW
    kernel, fast = _overrides.SHORT_KERNEL_ROW_BYTES, _overrides.FAST_SHORT_ROW_BYTES  # bytes

    def rows_of(n, dtype):  # rows of n, twice SMALL_CUDA_BYTES (past the small-input rule)
        size = torch.empty(0, dtype=dtype).element_size()
        return torch.randn(2 * SMALL_CUDA_BYTES // size // n, n, device=device, dtype=dtype)

    cuda = device == "cuda"
    bf, fl = torch.bfloat16, torch.float32
    cases = [(bf, 7, False, False), (bf, fast // 2, False, False), (bf, fast // 2 + 1, False, cuda),
             (bf, fast // 2 + 1, True, False), (bf, 100, False, cuda), (bf, 100, True, False),
             (bf, kernel // 2, False, cuda), (bf, kernel // 2, True, False), (bf, kernel // 2 + 1, False, cuda),
             (bf, kernel // 2 + 1, True, False), (bf, short - 1, True, False), (bf, short, False, False),
             (fl, fast // 4, False, False), (fl, kernel // 4 + 1, True, cuda), (fl, shorter - 1, True, cuda),
             (fl, shorter, True, False), (fl, shorter, False, cuda), (fl, short - 1, False, cuda),
             (fl, short - 1, True, False), (fl, short, False, False)]
    with metalcore.pytorch_overrides(ops=["softmax"]):
        for dtype, n, grad, pytorchs in cases:
            x = rows_of(n, dtype).requires_grad_(grad)
            metalcore.reset_call_counts()
            metalcore.reset_fallback_counts()
            got = fn(x)
            with metalcore.pytorch_overrides(ops=[]):
                want = fn(x)
            fell = metalcore.fallback_counts().get("softmax", {})
            if pytorchs:
                torch.testing.assert_close(got, want, rtol=0, atol=0)
                assert _lib.CALLS["softmax_fwd"] == 0 and fell == {_overrides.SHORT_ROWS: 1}, (dtype, n, grad, fell)
            else:
                assert _lib.CALLS["softmax_fwd"] == 1 and not fell, (dtype, n, grad, dict(_lib.CALLS), fell)
                torch.testing.assert_close(got, want, rtol=0.02, atol=1e-3)
                if grad:  # and its backward is metalcore's too
                    got.sum().backward()
                    assert _lib.CALLS["softmax_bwd"] == 1, (dtype, n, dict(_lib.CALLS))


@pytest.mark.skipif(not metalcore._ops.CUSTOM_OPS, reason=f"PyTorch {torch.__version__} has no custom ops (2.4+)")
def test_compiled_overrides_keep_small_inputs_without_size_guards(device, monkeypatch):
    """Under torch.compile a patched function gives PyTorch's results, the
    input past SMALL_CUDA_BYTES reaches metalcore, and asking the size adds
    no guard on it: after a dynamic compile's first calls, inputs either
    side of it compile nothing more. (PyTorch 2.11 keeps the patched
    F.softmax and F.silu as calls in the graph, which run their eager
    rules, SMALL_CUDA_BYTES among them.)"""
    from torch._dynamo.testing import CompileCounter
    from metalcore import _lib
    monkeypatch.setattr(metalcore._overrides, "SMALL_CUDA_BYTES", SMALL_CUDA_BYTES)
    torch._dynamo.reset()
    counter = CompileCounter()
    # rows of SHORT_CUDA_SOFTMAX_ROW columns (shorter ones stay PyTorch's on CUDA)
    xs = [torch.randn(rows, 512, device=device) for rows in (3, 5, SMALL_CUDA_BYTES // 2048 + 100, 7)]
    want = [F.silu(F.softmax(x, -1)) for x in xs]
    with metalcore.pytorch_overrides(ops=["softmax", "silu"]):
        f = torch.compile(lambda x: F.silu(F.softmax(x, -1)), backend=counter, dynamic=True, fullgraph=True)
        got = [f(x) for x in xs[:2]]
        frames = counter.frame_count
        metalcore.reset_call_counts()
        got += [f(x) for x in xs[2:]]
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert counter.frame_count == frames, (frames, counter.frame_count)
    assert _lib.CALLS["softmax_fwd"] >= 1 and _lib.CALLS["silu_fwd"] >= 1, dict(_lib.CALLS)
