"""Host time per call through metalcore's public Python API against
PyTorch's own op, same process, same tensors (bench/python_host.md).

    python3 bench/python_host.py [cpu|cuda ...] > bench/python_host.md

Each row: the median over 15 rounds of the mean host time of 1,000 calls
on a tiny tensor (4 x 64; float32 on CPU, bfloat16 on CUDA), nothing synced
inside a round; PyTorch's rounds and metalcore's alternate, so that both
sides see the same host (its speed drifts by tens of percent over seconds
on a shared machine). Module and AdamW rows include autograd's bookkeeping as a
model sees it (parameters that require grad). The bar (issue 34): metalcore
<= max(1.5 x PyTorch, PyTorch + 5 us); AdamW.step on 75 tensors <= PyTorch's
fused step (CUDA) or foreach step (CPU). CPU rows run both at the same
thread count. The layer table's rows take their rounds in turn too, as do
the rows of the last table: a norm module built as metalcore's are, with
nothing in its forward but what every such call must do, against the bar
PyTorch's module sets in the same rounds (least_rows)."""
import contextlib
import ctypes
import pathlib
import shutil
import statistics
import subprocess
import time

import torch
import torch.nn.functional as F

import harness
import metalcore

ROUNDS, CALLS = 15, 1000
OVERRIDDEN = ("rms_norm", "layer_norm", "softmax", "gelu", "silu")


def paired_us(ours, theirs, device, calls=CALLS, around=contextlib.nullcontext):
    """(ours, theirs): each one's host time, the median of ROUNDS rounds
    of CALLS calls, their rounds alternating; ours' rounds run inside
    around()."""
    return harness.paired_us(ours, theirs, calls, ROUNDS, device, around)


def idle_us(fn, calls=200):
    """fn's host time when the GPU has gone idle before it (as it has
    before each tiny call of a real program, whose launch then costs more
    than one queued behind busy work): the median over calls, each after a
    synchronize."""
    fn()
    times = []
    for _ in range(calls):
        torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e6)
    return statistics.median(times)


def torch_rms_norm(x, w, eps=1e-6):
    if hasattr(F, "rms_norm"):
        return F.rms_norm(x, x.shape[-1:], w, eps)
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w


def cases(device):
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    x = torch.randn(4, 64, device=device, dtype=dtype)
    r = torch.randn_like(x)
    w, b = torch.randn(64, device=device, dtype=dtype), torch.randn(64, device=device, dtype=dtype)
    out = [
        ("rms_norm", lambda: metalcore.rms_norm(x, w), lambda: torch_rms_norm(x, w)),
        ("fused_add_rms_norm", lambda: metalcore.fused_add_rms_norm(x, r, w), lambda: torch_rms_norm(x + r, w)),
        ("layer_norm", lambda: metalcore.layer_norm(x, w, b), lambda: F.layer_norm(x, (64,), w, b)),
        ("softmax", lambda: metalcore.softmax(x), lambda: F.softmax(x, -1)),
        ("gelu", lambda: metalcore.gelu(x), lambda: F.gelu(x)),
        ("gelu tanh", lambda: metalcore.gelu(x, "tanh"), lambda: F.gelu(x, approximate="tanh")),
        ("silu", lambda: metalcore.silu(x), lambda: F.silu(x)),
    ]
    mods = [("nn.LayerNorm", metalcore.nn.LayerNorm(64), torch.nn.LayerNorm(64)),
            ("nn.SiLU", metalcore.nn.SiLU(), torch.nn.SiLU()), ("nn.GELU", metalcore.nn.GELU(), torch.nn.GELU()),
            ("nn.Softmax", metalcore.nn.Softmax(-1), torch.nn.Softmax(-1))]
    if hasattr(torch.nn, "RMSNorm"):
        mods.insert(0, ("nn.RMSNorm", metalcore.nn.RMSNorm(64, eps=1e-6), torch.nn.RMSNorm(64, eps=1e-6)))
    for name, ours, theirs in mods:
        ours, theirs = ours.to(device, dtype), theirs.to(device, dtype)
        out.append((name, lambda m=ours: m(x), lambda m=theirs: m(x)))
    # the patched functions, called only while the overrides are on (see main); PyTorch's kept aside
    originals = {n: getattr(F, n) for n in OVERRIDDEN if hasattr(F, n)}  # F.rms_norm from PyTorch 2.4
    with metalcore.pytorch_overrides(list(OVERRIDDEN)):
        patched = {n: getattr(F, n) for n in originals}
    out += [("override F.layer_norm", lambda: patched["layer_norm"](x, (64,), w, b),
             lambda: originals["layer_norm"](x, (64,), w, b)),
            ("override F.softmax", lambda: patched["softmax"](x, -1), lambda: originals["softmax"](x, -1)),
            ("override F.gelu", lambda: patched["gelu"](x), lambda: originals["gelu"](x)),
            ("override F.silu", lambda: patched["silu"](x), lambda: originals["silu"](x))]
    if "rms_norm" in originals:
        out.append(("override F.rms_norm", lambda: patched["rms_norm"](x, (64,), w, 1e-6),
                    lambda: originals["rms_norm"](x, (64,), w, 1e-6)))
    a = torch.randn(8, 8, device=device, dtype=torch.float32)
    out.append(("linalg.qr 8x8", lambda: metalcore.linalg.qr(a), lambda: torch.linalg.qr(a)))
    return out


def adamw_rows(device):
    """AdamW.step on 75 tensors of a small model's shapes."""
    torch.manual_seed(0)
    shapes = [(256, 256), (256,), (1024, 256), (256, 1024), (256,)] * 15
    rows = []
    for name, kw in (("AdamW.step, 75 tensors", {}), ("AdamW.step, 75 tensors, capturable", {"capturable": True})):
        if kw and device != "cuda":
            continue
        ps = [torch.randn(s, device=device, requires_grad=True) for s in shapes]
        qs = [p.detach().clone().requires_grad_() for p in ps]
        for p, q in zip(ps, qs):
            p.grad = torch.randn_like(p)
            q.grad = p.grad.clone()
        ref_kw = {"fused": True} if device == "cuda" else {"foreach": True}
        ours = metalcore.optim.AdamW(ps, lr=1e-3, **kw)
        theirs = torch.optim.AdamW(qs, lr=1e-3, **ref_kw, **kw)
        rows.append((name + (" (PyTorch fused)" if device == "cuda" else " (PyTorch foreach)"),
                     *paired_us(ours.step, theirs.step, device, 50)))
    return rows


def layer_rows(device):
    """Where one call's host time goes: metalcore.silu and metalcore.rms_norm
    (with a weight that requires grad) from the public function down to the
    library call with descriptors made beforehand."""
    from metalcore import _autograd, _kernels, _lib, _ops
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    x = torch.randn(4, 64, device=device, dtype=dtype)
    xg = x.clone().requires_grad_()
    w = torch.randn(64, device=device, dtype=dtype, requires_grad=True)
    y = torch.empty_like(x)
    held = [ctypes.create_string_buffer(_lib.SLOT_BYTES) for _ in range(2)]  # alive while the rows run
    for h, t in zip(held, (x, y)):
        _lib.pack_into(h, 0, ctypes.addressof(h), t)
    xa, ya = (ctypes.addressof(h) for h in held)
    _, forms = _lib.admit(x)
    queue = forms.queue()

    def prebuilt(held=held):
        _lib.check(_lib.lib.mc_silu_fwd(xa, ya, queue))

    class Saving(torch.autograd.Function):
        """A norm's Function without its kernel: the output allocated and
        three tensors saved."""
        @staticmethod
        def forward(ctx, x, w):
            y = torch.empty_like(x)
            ctx.save_for_backward(x, w, y)
            return y

        @staticmethod
        def backward(ctx, dy):
            return dy, None

    class Identity(torch.nn.Module):
        def forward(self, x):
            return x
    saving, identity = _autograd.direct(Saving), Identity()
    return [
        ("metalcore.silu (public function)", lambda: metalcore.silu(x)),
        ("  checks: _lib.admit", lambda: _lib.admit(x)),
        ("  _ops.silu (no checks)", lambda: _ops.silu(x, forms)),
        ("  _kernels.silu (no path choice)", lambda: _kernels.silu(x, forms=forms)),
        ("    torch.empty_like", lambda: torch.empty_like(x)),
        ("    describe x and y (the block kept in their Forms)", lambda: _lib.described("silu_fwd", (x, y), None, forms.plans)),
        ("    the stream or encoder (the Forms' queue getter)", lambda: forms.queue()),
        ("    mc_silu_fwd, descriptors made beforehand", prebuilt),
        ("metalcore.rms_norm, weight requires grad", lambda: metalcore.rms_norm(x, w)),
        ("  _ops.rms_norm (its Function and kernel call; no checks, no Forms)", lambda: _ops.rms_norm(x, w, 1e-6)),
        ("metalcore.silu, input requires grad", lambda: metalcore.silu(xg)),
        ("floor: a module call (Module.__call__ of a forward returning its input)", lambda: identity(x)),
        ("floor: an autograd Function (its C apply, as metalcore calls it) allocating its output and saving "
         "three tensors", lambda: saving(x, w)),
    ]


def least_rows(device):
    """A norm module with parameters that want gradients, at the least it
    can cost built as metalcore's are: a forward of only the checks
    (_lib.admit), an autograd Function's C apply, the output's and the
    statistics' allocations, the call plan's pointer writes, the library
    call and the saves; then the same without the checks and without the
    statistics' allocation (neither is a module metalcore could ship: what
    each piece costs in place). Next to PyTorch's module and metalcore's."""
    from metalcore import _autograd, _kernels, _lib
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    x = torch.randn(4, 64, device=device, dtype=dtype)
    plans = {}
    # the statistics' templates: empty_like of one expanded float32 is the
    # cheapest fresh tensor of their shape (as _kernels' _row_stats makes them)
    rstd_like, stats_like = (torch.empty(1, device=device).expand(k * x.shape[0]) for k in (1, 2))

    class LeastRMSNorm(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w, forms, stats):
            y = torch.empty_like(x)
            rstd = torch.empty_like(rstd_like) if stats else None
            a = _lib.described(("rmsnorm", stats), (x, w, y, rstd), None, plans)
            status = _kernels._rmsnorm_fwd(a[0], a[1], 1e-6, a[2], a[3], forms.queue())
            if status:
                _lib.fail(status)
            ctx.save_for_backward(x, w, rstd)
            return y

    class LeastLayerNorm(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w, b, forms, stats):
            y = torch.empty_like(x)
            s = torch.empty_like(stats_like) if stats else None
            a = _lib.described(("layernorm", stats), (x, w, b, y, s, s), {4: 0, 5: 1}, plans)
            status = _kernels._layernorm_fwd(a[0], a[1], a[2], 1e-5, a[3], a[4], a[5], forms.queue())
            if status:
                _lib.fail(status)
            ctx.save_for_backward(x, w, b, s)
            return y

    class Least(torch.nn.Module):
        def __init__(self, function, module, checks, stats):
            super().__init__()
            for name in ("weight", "bias"):
                if getattr(module, name, None) is not None:
                    self.register_parameter(name, getattr(module, name))
            self.apply_, self.checks, self.stats = _autograd.direct(function), checks, stats
            self.kept = _lib.admit(x, *self._parameters.values())[1]

        def forward(self, x):
            params = tuple(self._parameters.values())
            return self.apply_(x, *params, _lib.admit(x, *params)[1] if self.checks else self.kept, self.stats)

    def least(function, module, checks=True, stats=True):
        m = Least(function, module, checks, stats)
        return lambda: m(x)

    rows = []
    for name, theirs, ours, function in (
            ("nn.RMSNorm", getattr(torch.nn, "RMSNorm", None), metalcore.nn.RMSNorm, LeastRMSNorm),
            ("nn.LayerNorm", torch.nn.LayerNorm, metalcore.nn.LayerNorm, LeastLayerNorm)):
        if theirs is None:
            continue
        theirs, ours = theirs(64).to(device, dtype), ours(64).to(device, dtype)
        rows += [(f"PyTorch {name}", lambda m=theirs: m(x)), (f"metalcore {name}", lambda m=ours: m(x)),
                 ("  the least module", least(function, ours)),
                 ("  the least module without its checks", least(function, ours, checks=False)),
                 ("  the least module without its statistics' allocation", least(function, ours, stats=False))]
    return rows


def from_c():
    """The rows of bench/launch_floor.c (the driver's launch of an empty
    kernel and the library's calls, timed in C), where a C compiler is
    here; else none."""
    cc = shutil.which("cc")
    if cc is None:
        return []
    exe = pathlib.Path(__file__).resolve().parents[1] / "build" / "launch_floor"
    exe.parent.mkdir(exist_ok=True)
    subprocess.run([cc, "-O2", "-o", str(exe), str(exe.parents[1] / "bench" / "launch_floor.c"), "-ldl"], check=True)
    out = subprocess.run([str(exe), metalcore._lib.path], check=True, capture_output=True, text=True).stdout
    rows = [line.strip("|").split("|") for line in out.splitlines() if line.startswith("| ") and "---" not in line]
    return [("from C: " + what.strip(), float(us)) for what, us in rows[1:]]


def main():
    print("# Host time per call through the public Python API\n")
    print(f"metalcore {metalcore.__version__}, PyTorch {torch.__version__}, `python3 bench/python_host.py`. "
          f"Median over {ROUNDS} rounds of the mean of {CALLS} calls (AdamW: 50 steps), PyTorch's and "
          "metalcore's rounds alternating, in microseconds; "
          "CPU: float32 4x64, both at the same thread count; CUDA: bfloat16 4x64. Bar: metalcore <= "
          "max(1.5 x PyTorch, PyTorch + 5 us); AdamW <= PyTorch.\n")
    for device in harness.devices():
        print(f"## {device} ({harness.on(device)})\n")
        print("| call | PyTorch µs | metalcore µs | ratio | bar |")
        print("|---|---:|---:|---:|---|")
        for call, ours, theirs in cases(device):
            around = (lambda: metalcore.pytorch_overrides(list(OVERRIDDEN))) if call.startswith("override") else \
                contextlib.nullcontext
            t_ours, t_theirs = paired_us(ours, theirs, device, around=around)
            ok = t_ours <= max(1.5 * t_theirs, t_theirs + 5)
            print(f"| {call} | {t_theirs:.1f} | {t_ours:.1f} | {t_theirs / t_ours:.2f} | {'met' if ok else 'NOT met'} |")
        for call, t_ours, t_theirs in adamw_rows(device):
            print(f"| {call} | {t_theirs:.1f} | {t_ours:.1f} | {t_theirs / t_ours:.2f} | "
                  f"{'met' if t_ours <= t_theirs else 'NOT met'} |")
        print(f"\n### Where a call's host time goes ({device})\n")
        print("| layer | µs |")
        print("|---|---:|")
        rows = layer_rows(device)
        for (what, fn), us in zip(rows, harness.interleaved_us([fn for _, fn in rows], CALLS, ROUNDS, device)):
            print(f"| {what} | {us:.2f} |")
            if device == "cuda" and what.startswith("    mc_silu_fwd"):
                print(f"| {what}, the GPU idle before it | {idle_us(fn):.2f} |")
        if device == "cuda":
            for what, us in from_c():
                print(f"| {what} | {us:.2f} |")
        print(f"\n### The least a norm module can cost ({device})\n")
        print("| module | µs | bar |")
        print("|---|---:|---|")
        rows = least_rows(device)
        for (what, _), us in zip(rows, harness.interleaved_us([fn for _, fn in rows], CALLS, ROUNDS, device)):
            if what.startswith("PyTorch"):
                bar = max(1.5 * us, us + 5)
            print(f"| {what} | {us:.2f} | {'' if what.startswith('PyTorch') else 'met' if us <= bar else 'NOT met'} |")
        print()


if __name__ == "__main__":
    main()
