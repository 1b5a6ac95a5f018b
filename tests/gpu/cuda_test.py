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
torch.cuda.synchronize()
torch.cuda._sleep(200_000_000)
t0 = time.perf_counter()
for _ in range(10):
    check("softmax_fwd", x, y, stream())
    check("silu_fwd", x, y, stream())
host_us = (time.perf_counter() - t0) / 20 * 1e6
busy = not torch.cuda.current_stream().query()
torch.cuda.synchronize()
expect(busy, "the stream should still be busy after the calls returned")
expect(host_us < 100, f"calls took {host_us:.1f} us each on a busy stream")
close(y, F.silu(x), torch.float32, "silu after the busy stream")
print(f"never blocks: {host_us:.1f} us per call while the stream sleeps")

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

print("FAILURES:", len(failures))
raise SystemExit(1 if failures else 0)
