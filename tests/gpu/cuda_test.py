"""CUDA backend checks that need a host framework: results against PyTorch's
own ops, never blocking, stream ordering, CUDA graph capture, bad pointers.
Run from the repository root: python3 tests/gpu/cuda_test.py"""
import ctypes
import time

import torch
import torch.nn.functional as F

from mc import LIB, call, check, desc, stream, workspace

torch.manual_seed(0)
dev = "cuda"
failures = []


def expect(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL", what)


def close(got, want, dtype, what):
    tol = {torch.float32: 1e-5, torch.bfloat16: 1e-2, torch.float16: 2e-3}[dtype]
    err = ((got.double() - want.double()).norm() / max(want.double().norm().item(), 1e-30)).item()
    expect(err < tol and torch.isfinite(got).all().item(), f"{what}: relative error {err:.2e} (tol {tol:.0e})")


def against_torch(shape, dtype, unaligned=False):
    rows, cols = shape
    if unaligned:  # rows start one element into a wider buffer
        x = torch.randn(rows, cols + 1, device=dev, dtype=dtype)[:, 1:]
    else:
        x = torch.randn(rows, cols, device=dev, dtype=dtype)
    w = torch.randn(cols, device=dev, dtype=dtype) * 0.5 + 1
    b = torch.randn(cols, device=dev, dtype=dtype)
    dy = torch.randn(rows, cols, device=dev, dtype=dtype)
    tag = f"{dtype} {shape}{' unaligned' if unaligned else ''}"
    y = torch.full_like(dy, float("nan"))
    rstd = torch.empty(rows, device=dev)
    check("rmsnorm_fwd", x, w, 1e-5, y, rstd, stream())
    close(y, F.rms_norm(x.float(), (cols,), w.float(), 1e-5), dtype, "rmsnorm " + tag)
    res, ro = torch.randn_like(dy), torch.empty_like(dy)
    check("fused_add_rmsnorm_fwd", x, res, w, 1e-5, y, ro, None, stream())
    s = (x + res)
    close(ro, s, dtype, "fused residual " + tag)
    close(y, F.rms_norm(s.float(), (cols,), w.float(), 1e-5), dtype, "fused y " + tag)
    mean = torch.empty(rows, device=dev)
    check("layernorm_fwd", x, w, b, 1e-5, y, mean, rstd, stream())
    close(y, F.layer_norm(x.float(), (cols,), w.float(), b.float(), 1e-5), dtype, "layernorm " + tag)
    check("softmax_fwd", x, y, stream())
    close(y, torch.softmax(x.float(), -1), dtype, "softmax " + tag)
    for approx, name in ((0, "none"), (1, "tanh")):
        check("gelu_fwd", x.contiguous(), approx, y, stream())
        close(y, F.gelu(x.float(), approximate=name), dtype, f"gelu {name} " + tag)
    check("silu_fwd", x.contiguous(), y, stream())
    close(y, F.silu(x.float()), dtype, "silu " + tag)
    # backward against autograd in float32
    xf, wf, bf = (t.float().requires_grad_() for t in (x, w, b))
    dx, dw, db = torch.empty_like(dy), torch.empty_like(w), torch.empty_like(b)
    check("rmsnorm_fwd", x, w, 1e-5, y, rstd, stream())
    check("rmsnorm_bwd", dy, x, w, rstd, dx, dw, workspace("rmsnorm", x), stream())
    gx, gw = torch.autograd.grad(F.rms_norm(xf, (cols,), wf, 1e-5), (xf, wf), dy.float())
    close(dx, gx, dtype, "rmsnorm dx " + tag)
    close(dw, gw, dtype, "rmsnorm dweight " + tag)
    check("layernorm_fwd", x, w, b, 1e-5, y, mean, rstd, stream())
    check("layernorm_bwd", dy, x, w, mean, rstd, dx, dw, db, workspace("layernorm", x), stream())
    gx, gw, gb = torch.autograd.grad(F.layer_norm(xf, (cols,), wf, bf, 1e-5), (xf, wf, bf), dy.float())
    close(dx, gx, dtype, "layernorm dx " + tag)
    close(dw, gw, dtype, "layernorm dweight " + tag)
    close(db, gb, dtype, "layernorm dbias " + tag)
    sm = torch.softmax(x.float(), -1).to(dtype)
    check("softmax_bwd", dy, sm, dx, stream())
    smf = sm.float()
    close(dx, smf * (dy.float() - (dy.float() * smf).sum(-1, keepdim=True)), dtype, "softmax dx " + tag)
    xc = x.contiguous()
    xcf = xc.float().requires_grad_()
    for approx, name in ((0, "none"), (1, "tanh")):
        check("gelu_bwd", dy, xc, approx, dx, stream())
        close(dx, torch.autograd.grad(F.gelu(xcf, approximate=name), xcf, dy.float())[0], dtype, f"gelu {name} dx " + tag)
    check("silu_bwd", dy, xc, dx, stream())
    close(dx, torch.autograd.grad(F.silu(xcf), xcf, dy.float())[0], dtype, "silu dx " + tag)


for dtype in (torch.float32, torch.bfloat16, torch.float16):
    for shape in ((65536, 1024), (16384, 4096), (4096, 8192), (7, 4095), (3, 1000), (1, 65537), (33, 12288)):
        against_torch(shape, dtype)
    against_torch((64, 1027), dtype, unaligned=True)
    against_torch((64, 4096), dtype, unaligned=True)
torch.cuda.synchronize()
print("against torch: done")

# never blocks: a stream busy for ~100 ms; each call returns in microseconds
x = torch.randn(4096, 4096, device=dev)
y = torch.empty_like(x)
check("cuda_prepare", 0)
for _ in range(3):  # the shim's first-call lookups are not what is tested
    check("softmax_fwd", x, y, stream())
    check("silu_fwd", x, y, stream())
torch.cuda.synchronize()
torch.cuda._sleep(200_000_000)
times = []
for _ in range(10):
    for op in ("softmax_fwd", "silu_fwd"):
        t0 = time.perf_counter()
        check(op, x, y, stream())
        times.append((time.perf_counter() - t0) * 1e6)
busy = not torch.cuda.current_stream().query()
torch.cuda.synchronize()
times.sort()
expect(busy, "the stream should still be busy after the calls returned")
# a call that waited for the stream would take the sleep's ~100 ms; the
# slowest may still meet a host hiccup (a page fault, a thread switch), and
# every call includes the shim's own Python (tens of µs on a slow host)
expect(times[-1] < 10_000, f"a call took {times[-1]:.0f} us on a busy stream")
expect(times[len(times) // 2] < 500, f"calls took a median {times[len(times) // 2]:.1f} us on a busy stream")
close(y, F.silu(x), torch.float32, "silu after the busy stream")
print(f"never blocks: median {times[len(times) // 2]:.1f} us, slowest {times[-1]:.1f} us per call while the stream sleeps")

# a side stream: ordered after the torch work queued on it
side = torch.cuda.Stream()
with torch.cuda.stream(side):
    x2 = torch.randn(2048, 2048, device=dev) * 3
    y2 = torch.empty_like(x2)
    check("gelu_fwd", x2, 0, y2, stream())
    z2 = y2 * 2
side.synchronize()
close(z2, F.gelu(x2) * 2, torch.float32, "side stream order")

# CUDA graph: capture metalcore calls, replay on new data
xg = torch.randn(1024, 2048, device=dev)
wg = torch.randn(2048, device=dev)
yg, rg = torch.empty_like(xg), torch.empty(1024, device=dev)
sg = torch.empty_like(xg)
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    check("rmsnorm_fwd", xg, wg, 1e-6, yg, rg, stream())
    check("softmax_fwd", yg, sg, stream())
for _ in range(3):
    xg.copy_(torch.randn_like(xg))
    g.replay()
    torch.cuda.synchronize()
    close(sg, torch.softmax(F.rms_norm(xg, (2048,), wg, 1e-6), -1), torch.float32, "graph replay")
print("graph capture: replays right")

# bad input on CUDA: nothing launched, clear status
xc, yc = torch.randn(8, 16), torch.empty(8, 16, device=dev)
expect(call("softmax_fwd", xc, yc, stream()) == 1, "CPU and CUDA mixed")
print("  mixed:", LIB.mc_last_error().decode())
host = torch.randn(8, 16)
st = LIB.mc_softmax_fwd(desc(host, device_type=2), desc(yc), stream())
expect(st == 1 and b"not CUDA device memory" in LIB.mc_last_error(), "host pointer as device memory")
print("  host pointer:", LIB.mc_last_error().decode())
d1 = desc(yc)
d1.contents.device_id = 1
expect(LIB.mc_softmax_fwd(desc(torch.randn(8, 16, device=dev)), d1, stream()) != 0, "device id 1")
print("  device 1:", LIB.mc_last_error().decode())
nc = torch.randn(16, 8, device=dev).t()
expect(call("silu_fwd", nc, torch.empty(8, 16, device=dev), stream()) == 4, "non-contiguous elementwise")


# QR against torch.linalg.qr (cuSOLVER): same signs (LAPACK's), so R agrees;
# reconstruction and orthogonality within a bound of size times float32's
# precision; awkward matrices; a CUDA graph of the blocked path.
def qr_call(a, mode):
    m, n = a.shape[-2:]
    k = min(m, n)
    rows, cols = (m, m) if mode == 1 else (k, k)
    r = torch.full((*a.shape[:-2], rows, n), float("nan"), device=dev, dtype=a.dtype)
    q = torch.full((*a.shape[:-2], m, cols), float("nan"), device=dev, dtype=a.dtype) if mode != 2 else None
    size = ctypes.c_int64()
    check("qr_workspace_size", a, mode, ctypes.byref(size))
    ws = torch.empty(size.value, dtype=torch.uint8, device=dev) if size.value else None
    return q, r, ws


def qr_checks(a, tag):
    m, n = a.shape[-2:]
    bound = 10 * max(m, n) * 2.0 ** -24
    ad = a.double()
    for mode in (0, 1, 2):
        q, r, ws = qr_call(a, mode)
        check("qr", a, mode, q, r, ws, stream())
        torch.cuda.synchronize()
        what = f"qr {tag} mode {mode}"
        expect(bool((r.tril(-1) == 0).all()), what + ": r below the diagonal")
        if mode == 2:
            q2, r2, ws2 = qr_call(a, 0)
            check("qr", a, 0, q2, r2, ws2, stream())
            expect(torch.equal(r, r2), what + ": r-only differs from reduced r")
            continue
        qd, rd = q.double(), r.double()
        rows = min(qd.shape[-1], rd.shape[-2])
        rec = (qd[..., :rows] @ rd[..., :rows, :] - ad).norm() / ad.norm().clamp_min(1e-300)
        eye = torch.eye(qd.shape[-1], device=dev, dtype=torch.float64)
        orth = (qd.transpose(-1, -2) @ qd - eye).abs().max()
        expect(rec.item() <= bound or ad.norm().item() == 0 and qd.isfinite().all().item(),
               f"{what}: ||QR - A||/||A|| = {rec.item():.2e} (bound {bound:.1e})")
        expect(orth.item() <= bound, f"{what}: ||Q^T Q - I|| = {orth.item():.2e} (bound {bound:.1e})")
        if mode == 0 and "random" in tag:
            _, rt = torch.linalg.qr(a)
            err = ((r - rt).norm() / rt.norm()).item()
            expect(err <= bound, f"{what}: R differs from torch's by {err:.2e}")


for batch, m, n in ((500, 32, 32), (40, 128, 128), (7, 100, 50), (5, 17, 90), (3, 300, 200), (2, 200, 300),
                    (1, 1030, 260), (1, 700, 700), (4, 129, 129)):
    base = torch.randn(batch, m, n, device=dev)
    kinds = {"random": base, "zero": torch.zeros_like(base), "tiny": base * 1e-30, "huge": base * 1e30,
             "rank-2": (base[..., :, :2] @ torch.randn(batch, 2, n, device=dev)).contiguous()}
    for kind, a in kinds.items():
        qr_checks(a, f"{kind} {batch}x{m}x{n}")
    for dtype in (torch.bfloat16, torch.float16):
        a = base.to(dtype)
        q, r, ws = qr_call(a, 0)
        check("qr", a, 0, q, r, ws, stream())
        rec = ((q.double() @ r.double() - a.double()).norm() / a.double().norm()).item()
        expect(rec < 2e-2, f"qr {dtype} {batch}x{m}x{n}: ||QR - A||/||A|| = {rec:.2e}")
print("qr: checked")

for shape in ((64, 32, 32), (2, 300, 260)):  # both paths in a CUDA graph
    a = torch.randn(*shape, device=dev)
    q, r, ws = qr_call(a, 0)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        check("qr", a, 0, q, r, ws, stream())
    for _ in range(2):
        a.copy_(torch.randn_like(a))
        g.replay()
        torch.cuda.synchronize()
        rec = ((q.double() @ r.double() - a.double()).norm() / a.double().norm()).item()
        expect(rec < 1e-5, f"qr graph replay {shape}: {rec:.2e}")
print("qr graph capture: replays right")

print("FAILURES:", len(failures))
raise SystemExit(1 if failures else 0)
