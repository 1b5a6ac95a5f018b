"""The framework protocols and the silent-wrong-result cases of the second
correctness sweep: GradScaler, tracing and scripting, model patching,
all-or-nothing steps, complex parameters, overrides that must fall back,
overrides across threads and beside other wrappers, thread counts, and
memory exhaustion. Each case failed before its fix."""
import ctypes.util
import os
import subprocess
import sys
import threading
import warnings

import pytest
import torch
import torch.nn.functional as F

import metalcore


def _misaligned(n):
    """A float32 CPU tensor of n elements whose data starts one byte past an
    element boundary (what torch.frombuffer makes of an odd offset)."""
    buf = bytearray(4 * n + 8)
    t = torch.frombuffer(buf, dtype=torch.float32, offset=1, count=n)
    t._keep = buf
    return t


# ---- 1. GradScaler --------------------------------------------------------------------

class _Stage:
    def __init__(self, name):
        self.name = name


class _Scaler113:
    """The part of PyTorch 1.13's GradScaler an optimizer with
    _step_supports_amp_scaling sees: it calls step(grad_scaler=self)."""

    def __init__(self, opt, scale, found_inf, stage="READY"):
        self.scale, self.found = torch.tensor([scale]), torch.tensor([found_inf])
        self._per_optimizer_states = {id(opt): {"stage": _Stage(stage), "found_inf_per_device": {}}}
        self.opt = opt

    def _check_inf_per_device(self, opt):
        state = self._per_optimizer_states[id(opt)]
        state["found_inf_per_device"] = {torch.device("cpu"): self.found}
        return state["found_inf_per_device"]

    def _get_scale_async(self):
        return self.scale

    def step(self):
        return self.opt.step(grad_scaler=self)


def _pair(lr=1e-2):
    torch.manual_seed(0)
    ours = [torch.randn(6, requires_grad=True), torch.randn(3, 4, requires_grad=True)]
    ref = [p.detach().clone().requires_grad_() for p in ours]
    return ours, ref, metalcore.optim.AdamW(ours, lr=lr), torch.optim.AdamW(ref, lr=lr)


def test_grad_scaler_of_pytorch_1_13_unscales_and_skips():
    ours, ref, opt, ref_opt = _pair()
    for step in range(4):
        grads = [torch.randn_like(p) for p in ref]
        for o, r, g in zip(ours, ref, grads):
            o.grad, r.grad = g * 1024, g.clone()
        if step == 1:
            before = [p.detach().clone() for p in ours]
            _Scaler113(opt, 1024.0, 1.0).step()
            assert all(torch.equal(a, b) for a, b in zip(before, ours))
            assert int(opt.state[ours[0]]["step"]) == 1
            continue
        _Scaler113(opt, 1024.0, 0.0).step()
        ref_opt.step()
    for o, r in zip(ours, ref):
        torch.testing.assert_close(o, r, rtol=1e-5, atol=1e-6)


def test_grad_scaler_after_unscale_does_not_divide_again():
    ours, ref, opt, ref_opt = _pair()
    for o, r in zip(ours, ref):
        o.grad = torch.randn_like(r)
        r.grad = o.grad.clone()
    _Scaler113(opt, 1024.0, 0.0, stage="UNSCALED").step()
    ref_opt.step()
    for o, r in zip(ours, ref):
        torch.testing.assert_close(o, r, rtol=1e-5, atol=1e-6)


def test_step_signature_takes_the_attribute_protocol():
    """PyTorch 2's GradScaler passes itself only to a step() naming a
    grad_scaler parameter; metalcore's must not name one, and must refuse
    keywords it does not know."""
    import inspect
    assert "grad_scaler" not in inspect.signature(metalcore.optim.AdamW.step).parameters
    _, _, opt, _ = _pair()
    with pytest.raises(TypeError, match="grad_scale"):
        opt.step(grad_scale=torch.ones(1))


@pytest.mark.skipif(not hasattr(torch, "amp") or not hasattr(torch.amp, "GradScaler"),
                    reason="this PyTorch has no device-generic torch.amp.GradScaler (PyTorch 2.3+)")
@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_real_grad_scaler_overflow_keeps_weights(device):
    if device not in metalcore.backends() or (device == "cuda" and not torch.cuda.is_available()):
        pytest.skip(f"no {device} here")
    torch.manual_seed(0)
    p = torch.nn.Parameter(torch.ones(4, device=device))
    q = torch.nn.Parameter(torch.ones(4, device=device))
    opt, ref_opt = metalcore.optim.AdamW([p], lr=0.1), torch.optim.AdamW([q], lr=0.1)
    scaler, ref_scaler = torch.amp.GradScaler(device), torch.amp.GradScaler(device)
    for step, bad in enumerate((True, False, False)):
        for param, o, s in ((p, opt, scaler), (q, ref_opt, ref_scaler)):
            loss = (param * (float("inf") if bad else 1.0)).sum()
            s.scale(loss).backward()
            s.step(o)
            s.update()
            o.zero_grad()
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)
    assert torch.isfinite(p).all()


# ---- 2. tracing, ONNX, scripting ------------------------------------------------------

def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), metalcore.nn.LayerNorm(32), metalcore.nn.GELU(),
                               metalcore.nn.RMSNorm(32), metalcore.nn.SiLU(), metalcore.nn.Softmax(-1))


@pytest.mark.parametrize("grad", [False, True])
def test_jit_trace_records_exact_ops(grad, restore_overrides):
    model, x = _model(), torch.randn(8, 16)
    want = model(x)
    metalcore.enable_pytorch_overrides(list(metalcore.ALL))
    w = model[0].weight.detach()
    fn = lambda t: F.softmax(F.gelu(F.layer_norm(t @ w.T, (32,))), -1)  # noqa: E731
    with torch.set_grad_enabled(grad):
        traced_model = torch.jit.trace(model, x, check_trace=False)
        traced_fn = torch.jit.trace(fn, x, check_trace=False)
    for _ in range(2):
        torch.testing.assert_close(traced_model(x), want)
        torch.testing.assert_close(traced_fn(x), fn(x))
    y = torch.randn(3, 16)  # a trace replayed on other data is PyTorch's ops, not a stale buffer
    torch.testing.assert_close(traced_model(y), model(y))
    assert "aten::layer_norm" in str(traced_model.inlined_graph)


def test_onnx_export_contains_the_ops(tmp_path, restore_overrides):
    model, x = _model(), torch.randn(8, 16)
    metalcore.enable_pytorch_overrides(list(metalcore.ALL))
    path = tmp_path / "m.onnx"
    try:
        torch.onnx.export(model, (x,), str(path), dynamo=False) if "dynamo" in \
            torch.onnx.export.__code__.co_varnames else torch.onnx.export(model, (x,), str(path))
    except (ImportError, ModuleNotFoundError) as e:
        pytest.skip(f"ONNX export needs a package this machine lacks: {e}")
    data = path.read_bytes()
    assert b"Gemm" in data or b"MatMul" in data
    assert b"LayerNormalization" in data or b"ReduceMean" in data


def test_jit_script_compiles_pytorchs_modules():
    model, x = _model(), torch.randn(8, 16)
    scripted = torch.jit.script(model)
    torch.testing.assert_close(scripted(x), model(x), rtol=1e-5, atol=1e-6)
    fused = metalcore.nn.FusedAddRMSNorm(32, eps=1e-5)
    a, b = torch.randn(4, 32), torch.randn(4, 32)
    for got, want in zip(torch.jit.script(fused)(a, b), fused(a, b)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    # the parameters are the module's own
    assert scripted[1].weight.data_ptr() == model[1].weight.data_ptr()


# ---- 3. patch_model swaps only what is proven identical --------------------------------

class _BiasedRMSNorm(torch.nn.Module):
    def __init__(self, h):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(h))
        self.bias = torch.nn.Parameter(torch.randn(h))
        self.variance_epsilon = 1e-6

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype) + self.bias


class _ScaledLlamaRMSNorm(torch.nn.Module):
    """The Llama form but with an extra scaling statement."""

    def __init__(self, h):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(h))
        self.variance_epsilon = 1e-6

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32) * 2
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class _RenamedLlamaRMSNorm(torch.nn.Module):
    """The Llama form with other names, annotations and a docstring: the same computation."""

    def __init__(self, h):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(h))
        self.eps = 1e-6

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """RMSNorm."""
        dt = x.dtype
        x = x.to(torch.float32)
        var = x.pow(2).mean(-1, keepdim=True)  # the mean square
        x = x * torch.rsqrt(var + self.eps)
        return self.weight * x.to(dt)


def test_patch_model_leaves_forms_that_do_more():
    model = torch.nn.Sequential(_BiasedRMSNorm(8), _ScaledLlamaRMSNorm(8), _RenamedLlamaRMSNorm(8))
    x = torch.randn(3, 8)
    want = model(x)
    report = metalcore.patch_model(model)
    assert [name for name, _ in report["swapped"]] == ["2"]
    assert sorted(name for name, _, _ in report["left"]) == ["0", "1"]
    torch.testing.assert_close(model(x), want, rtol=1e-5, atol=1e-5)


# ---- 4. a refused step changes nothing, in any group ----------------------------------

def _two_groups():
    torch.manual_seed(0)
    a, b = torch.randn(5, requires_grad=True), torch.randn(7, requires_grad=True)
    opt = metalcore.optim.AdamW([{"params": [a]}, {"params": [b], "lr": 1e-3}], lr=1e-2)
    a.grad, b.grad = torch.randn(5), torch.randn(7)
    opt.step()
    return a, b, opt


@pytest.mark.parametrize("lr", [float("nan"), float("inf")])
def test_bad_lr_in_a_later_group_changes_nothing(lr):
    a, b, opt = _two_groups()
    opt.param_groups[1]["lr"] = lr
    before = [a.detach().clone(), b.detach().clone(), opt.state[a]["exp_avg"].clone(), float(opt.state[a]["step"])]
    with pytest.raises(metalcore.MetalcoreError, match="learning rate"):
        opt.step()
    assert torch.equal(a, before[0]) and torch.equal(b, before[1])
    assert torch.equal(opt.state[a]["exp_avg"], before[2]) and float(opt.state[a]["step"]) == before[3]


def test_misaligned_tensor_in_a_later_group_changes_nothing():
    a = torch.randn(5, requires_grad=True)
    m = _misaligned(6).requires_grad_()
    opt = metalcore.optim.AdamW([{"params": [a]}, {"params": [m]}], lr=1e-2)
    a.grad, m.grad = torch.randn(5), torch.randn(6)
    before = a.detach().clone()
    with pytest.raises(metalcore.MetalcoreError, match="aligned"):
        opt.step()
    assert torch.equal(a, before) and float(opt.state[a].get("step", 0)) == 0


def test_deepcopy_and_pickle_of_a_stepped_optimizer_step_on():
    """The kept plans (ctypes tables) are not state: a copy makes its own."""
    import copy
    import pickle
    torch.manual_seed(0)
    p = torch.randn(5, requires_grad=True)
    p.grad = torch.randn(5)
    opt = metalcore.optim.AdamW([p], lr=1e-2)
    opt.step()
    for other in (copy.deepcopy(opt), pickle.loads(pickle.dumps(opt))):
        q = other.param_groups[0]["params"][0]
        q.grad = p.grad.clone()
        other.step()
        assert float(other.state[q]["step"]) == 2
    opt.step()
    torch.testing.assert_close(q, p)


# ---- 5. complex parameters ----------------------------------------------------------

@pytest.mark.parametrize("amsgrad", [False, True] if torch.__version__ >= "2" else [False])  # 1.13's has no complex amsgrad
def test_complex_parameters_step_as_pytorch(amsgrad):
    torch.manual_seed(0)
    ours = [torch.randn(4, 3, dtype=torch.complex64, requires_grad=True), torch.randn(5, requires_grad=True)]
    ref = [p.detach().clone().requires_grad_() for p in ours]
    opt = metalcore.optim.AdamW(ours, lr=1e-2, amsgrad=amsgrad, weight_decay=0.1)
    ref_opt = torch.optim.AdamW(ref, lr=1e-2, amsgrad=amsgrad, weight_decay=0.1)
    for _ in range(5):
        for o, r in zip(ours, ref):
            o.grad = torch.randn_like(o)
            r.grad = o.grad.clone()
        opt.step()
        ref_opt.step()
    for o, r in zip(ours, ref):
        torch.testing.assert_close(o, r, rtol=1e-5, atol=1e-6)
    assert opt.state[ours[0]]["exp_avg"].dtype == torch.complex64
    assert metalcore.call_counts()["adamw_step_scaled"] > 0


# ---- 6. overrides compute wherever PyTorch does --------------------------------------

def test_overrides_fall_back_where_the_library_refuses(restore_overrides):
    metalcore.enable_pytorch_overrides(list(metalcore.ALL))
    deep = torch.randn([1] * 30 + [2, 3, 4])  # 33 dimensions
    mis = _misaligned(64).view(8, 8)
    x = torch.randn(4, 8)
    cases = [(lambda: F.silu(deep), lambda o: o(deep), "silu"),
             (lambda: F.softmax(deep, -1), lambda o: o(deep, -1), "softmax"),
             (lambda: F.silu(mis), lambda o: o(mis), "silu"),
             (lambda: F.gelu(mis), lambda o: o(mis), "gelu"),
             (lambda: F.softmax(mis, -1), lambda o: o(mis, -1), "softmax"),
             (lambda: F.layer_norm(x, (8,), eps=float("inf")), lambda o: o(x, (8,), eps=float("inf")), "layer_norm"),
             (lambda: F.layer_norm(x, (8,), eps=1e39), lambda o: o(x, (8,), eps=1e39), "layer_norm"),
             (lambda: F.layer_norm(mis, (8,)), lambda o: o(mis, (8,)), "layer_norm")]
    from conftest import ORIGINALS
    for got, want, name in cases:
        torch.testing.assert_close(got(), want(ORIGINALS[name]), equal_nan=True)


def test_adamw_negative_lr_and_huge_step_counts_as_pytorch():
    torch.manual_seed(0)
    ours = [torch.randn(6, requires_grad=True)]
    ref = [ours[0].detach().clone().requires_grad_()]
    opt, ref_opt = metalcore.optim.AdamW(ours, lr=1e-2), torch.optim.AdamW(ref, lr=1e-2)
    for step in range(6):
        g = torch.randn(6)
        ours[0].grad, ref[0].grad = g, g.clone()
        if step == 2:  # an unclamped schedule
            opt.param_groups[0]["lr"] = ref_opt.param_groups[0]["lr"] = -1e-2
        if step == 4:  # counts past 2^24 and 2^63
            for o, s in ((opt, 2.0 ** 63 + 2.0 ** 40), (ref_opt, 2.0 ** 63 + 2.0 ** 40)):
                o.state[o.param_groups[0]["params"][0]]["step"].fill_(s)
        opt.step()
        ref_opt.step()
        torch.testing.assert_close(ours[0], ref[0], rtol=1e-5, atol=1e-6)
    assert float(opt.state[ours[0]]["step"]) == float(ref_opt.state[ref[0]]["step"])


def test_checks_kept_per_form_leave_each_call_its_own():
    """What a tuple of input forms decides is asked once; each call still
    asks what its own tensors' data and type decide, and a tensor whose form
    changed in place is described anew."""
    buf = bytearray(4 * 64 + 8)
    aligned = torch.frombuffer(buf, dtype=torch.float32, offset=0, count=64).view(8, 8)
    mis = _misaligned(64).view(8, 8)
    aligned.copy_(torch.randn(8, 8))
    mis.copy_(aligned)
    torch.testing.assert_close(metalcore.silu(aligned), F.silu(aligned))
    with pytest.raises(ValueError, match="aligned"):
        metalcore.silu(mis)
    torch.testing.assert_close(metalcore.softmax(aligned), F.softmax(aligned, -1))  # the same forms, after a refusal

    class Sub(torch.Tensor):
        pass

    with pytest.raises(ValueError, match="subclass"):
        metalcore.silu(aligned.as_subclass(Sub))
    x, w = torch.randn(4, 8), torch.randn(8)
    torch.testing.assert_close(metalcore.rms_norm(x, w), x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w)
    with pytest.raises(ValueError, match="mixed dtypes"):
        metalcore.rms_norm(x, w.half())
    x.resize_(2, 8).copy_(torch.randn(2, 8))  # the same tensor, another form
    torch.testing.assert_close(metalcore.layer_norm(x, w, None), F.layer_norm(x, (8,), w))
    torch.testing.assert_close(metalcore.silu(x), F.silu(x))


# ---- 7, 8. overrides across threads and beside other wrappers ------------------------

def test_blocks_on_two_threads_ending_out_of_order(restore_overrides):
    from conftest import ORIGINALS
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()

    def first():
        with metalcore.pytorch_overrides(["gelu"]):
            a_in.set()
            b_in.wait()
        a_out.set()

    def second():
        a_in.wait()
        with metalcore.pytorch_overrides(["gelu"]):
            b_in.set()
            a_out.wait()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert F.gelu is ORIGINALS["gelu"]
    assert metalcore.active_overrides() == {}


def test_another_libraries_wrapper_is_never_taken_for_the_original(restore_overrides):
    from conftest import ORIGINALS
    x = torch.randn(4, 4, dtype=torch.float64)  # a fallback: metalcore takes no float64
    metalcore.enable_pytorch_overrides(["gelu"])
    inner = F.gelu

    def wrapper(*args, **kwargs):  # a wrapper without __wrapped__, as some libraries write them
        return inner(*args, **kwargs)

    F.gelu = wrapper
    try:
        metalcore.disable_pytorch_overrides()
        metalcore.enable_pytorch_overrides(["gelu"])
        torch.testing.assert_close(F.gelu(x), ORIGINALS["gelu"](x))
        torch.testing.assert_close(wrapper(x), ORIGINALS["gelu"](x))
    finally:
        metalcore.disable_pytorch_overrides()
        F.gelu = ORIGINALS["gelu"]


# ---- 11. thread counts clamp -------------------------------------------------------

def test_thread_counts_clamp_instead_of_wrapping():
    before = metalcore.cpu_threads()
    try:
        for n in (2 ** 31, 2 ** 32, 2 ** 32 + 1):
            with pytest.warns(RuntimeWarning, match="clamped"):
                metalcore.set_cpu_threads(n)
            assert metalcore.cpu_threads() == metalcore.MAX_CPU_THREADS
        with pytest.raises(metalcore.MetalcoreError):
            metalcore.set_cpu_threads(-2 ** 40)
    finally:
        metalcore.set_cpu_threads(before)
    for v in ("2147483648", "4294967296", "4294967297"):
        out = subprocess.run([sys.executable, "-c", "import metalcore; print(metalcore.cpu_threads())"],
                             capture_output=True, text=True, env={**os.environ, "MC_NUM_THREADS": v})
        assert out.stdout.strip() == str(metalcore.MAX_CPU_THREADS), out.stderr
        assert "MC_NUM_THREADS" in out.stderr


# ---- 10. memory exhaustion is an error, not an abort -----------------------------------

def test_out_of_memory_is_an_error():
    """A QR whose working copies do not fit an address-space limit: the
    library returns MC_ERR_OUT_OF_MEMORY, and the process lives on."""
    code = ("import resource, torch, metalcore\n"
            "a = torch.randn(6000, 6000)\n"
            "vm = int(open('/proc/self/statm').read().split()[0]) * 4096\n"
            "resource.setrlimit(resource.RLIMIT_AS, (vm + (400 << 20), resource.RLIM_INFINITY))\n"
            "try:\n"
            "    metalcore.linalg.qr(a)\n"
            "    print('computed')\n"
            "except metalcore.MetalcoreMemoryError as e:\n"
            "    print('refused', isinstance(e, MemoryError), e.status)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["refused", "True", "7"], out.stdout + out.stderr[-2000:]


# ---- papercuts -------------------------------------------------------------------------

def test_library_that_is_not_metalcore_is_an_import_error():
    libm = ctypes.util.find_library("m")
    out = subprocess.run([sys.executable, "-c", "import metalcore"], capture_output=True, text=True,
                         env={**os.environ, "METALCORE_LIBRARY": libm})
    assert "ImportError" in out.stderr and libm in out.stderr and "not libmetalcore" in out.stderr


def test_warnings_point_at_the_callers_line():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        metalcore.set_cpu_threads(2 ** 40)  # this line
    metalcore.set_cpu_threads(os.cpu_count() or 1)
    assert caught and all(w.filename == __file__ for w in caught), [(w.filename, w.lineno) for w in caught]
