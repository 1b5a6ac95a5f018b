"""CUDA benchmark: metalcore's ops against PyTorch's own and against a
device-to-device copy of the same bytes (float32 elements), in one run.
GB/s counts bytes read plus written; times are medians of CUDA-event timings.
Run from the repository root on a GPU machine:
python3 bench/cuda_bench.py [out.md [section ...]], sections rows, adamw, qr, host (default all).
BENCH_ROWS=text keeps only the rows section's lines whose "op dtype rowsxcols" contains text."""
import ctypes
import os
import sys
import time

import torch
import torch.nn.functional as F
from triton.testing import do_bench

from report import Report  # the scripts' shared table

sys.path.insert(0, "tests/gpu")
from mc import LIB, check, desc, stream, workspace  # noqa: E402

dev = "cuda"
SHAPES = [(16384, 4096), (4096, 8192), (65536, 1024)]


def t_ms(fn):
    return do_bench(fn, warmup=25, rep=200, return_mode="median")


def copy_ms(nbytes):
    src = torch.empty(nbytes // 4, device=dev)
    dst = torch.empty_like(src)
    return t_ms(lambda: dst.copy_(src))


def cases(dtype, rows, cols):
    x = torch.randn(rows, cols, device=dev, dtype=dtype)
    res = torch.randn_like(x)
    dy = torch.randn_like(x)
    w = torch.randn(cols, device=dev, dtype=dtype)
    b = torch.randn(cols, device=dev, dtype=dtype)
    y, ro, dx = torch.empty_like(x), torch.empty_like(x), torch.empty_like(x)
    dw, db = torch.empty_like(w), torch.empty_like(b)
    rstd, mean = torch.empty(rows, device=dev), torch.empty(rows, device=dev)
    s = stream()
    D = lambda t: desc(t)  # noqa: E731
    dx_, x_, y_, dy_, w_, b_, res_, ro_ = D(dx), D(x), D(y), D(dy), D(w), D(b), D(res), D(ro)
    r_, m_, dw_, db_ = D(rstd), D(mean), D(dw), D(db)
    eps = ctypes.c_float(1e-5)
    wsr, wsl = workspace("rmsnorm", x), workspace("layernorm", x)
    wsr_, wsl_ = D(wsr), D(wsl)
    check("rmsnorm_fwd", x, w, 1e-5, y, rstd, s)
    check("layernorm_fwd", x, w, b, 1e-5, y, mean, rstd, s)
    sm = torch.softmax(x, -1)
    sm_ = D(sm)
    xr, wr, br = x.detach().requires_grad_(), w.detach().requires_grad_(), b.detach().requires_grad_()
    rms_out = F.rms_norm(xr, (cols,), wr, 1e-5)
    ln_out = F.layer_norm(xr, (cols,), wr, br, 1e-5)
    gelu_out, silu_out = F.gelu(xr), F.silu(xr)
    L = LIB
    # name, tensors moved, metalcore, torch
    return [
        ("rmsnorm fwd", 2, lambda: L.mc_rmsnorm_fwd(x_, w_, eps, y_, r_, s), lambda: F.rms_norm(x, (cols,), w, 1e-5)),
        ("fused add+rmsnorm fwd", 4, lambda: L.mc_fused_add_rmsnorm_fwd(x_, res_, w_, eps, y_, ro_, r_, s),
         lambda: F.rms_norm(x + res, (cols,), w, 1e-5)),
        ("layernorm fwd", 2, lambda: L.mc_layernorm_fwd(x_, w_, b_, eps, y_, m_, r_, s),
         lambda: F.layer_norm(x, (cols,), w, b, 1e-5)),
        ("softmax fwd", 2, lambda: L.mc_softmax_fwd(x_, y_, s), lambda: torch.softmax(x, -1)),
        ("gelu fwd", 2, lambda: L.mc_gelu_fwd(x_, 0, y_, s), lambda: F.gelu(x)),
        ("silu fwd", 2, lambda: L.mc_silu_fwd(x_, y_, s), lambda: F.silu(x)),
        ("rmsnorm bwd", 3, lambda: L.mc_rmsnorm_bwd(dy_, x_, w_, r_, dx_, dw_, wsr_, s),
         lambda: torch.autograd.grad(rms_out, (xr, wr), dy, retain_graph=True)),
        ("layernorm bwd", 3, lambda: L.mc_layernorm_bwd(dy_, x_, w_, m_, r_, dx_, dw_, db_, wsl_, s),
         lambda: torch.autograd.grad(ln_out, (xr, wr, br), dy, retain_graph=True)),
        ("softmax bwd", 3, lambda: L.mc_softmax_bwd(dy_, sm_, dx_, s),
         lambda: torch.ops.aten._softmax_backward_data(dy, sm, -1, dtype)),
        ("gelu bwd", 3, lambda: L.mc_gelu_bwd(dy_, x_, 0, dx_, s), lambda: torch.ops.aten.gelu_backward(dy, x)),
        ("silu bwd", 3, lambda: L.mc_silu_bwd(dy_, x_, dx_, s), lambda: torch.ops.aten.silu_backward(dy, x)),
    ]


def host_us(fn, batches=100, per_batch=200):
    """Median µs of host time per fn() call: timed in batches small enough
    for the launch queue, drained (untimed) between batches, so that the
    GPU's time never shows as the host's."""
    times = []
    for _ in range(batches):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(per_batch):
            fn()
        times.append((time.perf_counter() - t0) / per_batch * 1e6)
    return sorted(times)[len(times) // 2]


def call_overhead():
    """µs per mc_silu_fwd call on a tiny tensor, per ctypes call alone, per
    torch's own silu (out=) on the same tensors."""
    x = torch.randn(4, 64, device=dev)
    y = torch.empty_like(x)
    xd, yd, s = desc(x), desc(y), stream()
    host_us(lambda: LIB.mc_silu_fwd(xd, yd, s), batches=5)  # warm-up
    return (host_us(lambda: LIB.mc_silu_fwd(xd, yd, s)), host_us(LIB.mc_version),
            host_us(lambda: torch.ops.aten.silu.out(x, out=y)))


def adamw_row(dtype, total, tensors):
    sys.path.insert(0, "overrides/python")
    import metalcore
    size = total // tensors
    ps = [torch.randn(size, device=dev, dtype=dtype) * 0.1 for _ in range(tensors)]
    for p in ps:
        p.grad = torch.randn_like(p)
    from metalcore.optim import _Config, _pointers
    ms = [torch.zeros(size, device=dev) for _ in range(tensors)]
    vs = [torch.zeros(size, device=dev) for _ in range(tensors)]
    lists = [_pointers(x) for x in (ps, [p.grad for p in ps], ms, vs)]  # built once: time the step itself
    cfg = _Config(1e-3, 0.9, 0.999, 1e-8, 0.01, 1, 0, 0)
    n, s = ctypes.c_int64(tensors), stream()
    check_status = metalcore._lib.check
    t_mc = t_ms(lambda: check_status(LIB.mc_adamw_step(ctypes.byref(cfg), n, *lists, None, s)))
    graph = torch.cuda.CUDAGraph()  # the same step replayed: the GPU's time without the host's
    with torch.cuda.graph(graph):
        check_status(LIB.mc_adamw_step(ctypes.byref(cfg), n, *lists, None, stream()))
    t_graph = t_ms(graph.replay)
    tp = [p.detach().clone().float() if dtype == torch.float32 else p.detach().clone() for p in ps]
    for p, q in zip(tp, ps):
        p.grad = q.grad.clone()
    try:
        theirs = torch.optim.AdamW(tp, lr=1e-3, weight_decay=0.01, fused=True)
        theirs.step()
        t_ref = t_ms(theirs.step)
    except RuntimeError:
        t_ref = float("nan")
    nbytes = total * (3 * ps[0].element_size() + 16)
    copy = copy_ms(nbytes // 2)
    return (f"| {str(dtype)[6:]} | {total} | {tensors} | {t_mc:.3f} | {nbytes / t_mc / 1e6:.0f} | "
            f"{100 * copy / t_mc:.0f}% | {t_graph:.3f} | {100 * copy / t_graph:.0f}% | {t_ref:.3f} | {t_ref / t_mc:.2f}× |")


def qr_row(batch, m, n):
    a = torch.randn(batch, m, n, device=dev)
    k = min(m, n)
    q, r = torch.empty(batch, m, k, device=dev), torch.empty(batch, k, n, device=dev)
    size = ctypes.c_int64()
    check("qr_workspace_size", a, 0, ctypes.byref(size))
    ws = torch.empty(max(size.value, 1), dtype=torch.uint8, device=dev)
    a_, q_, r_, ws_, s = desc(a), desc(q), desc(r), desc(ws) if size.value else None, stream()
    t_mc = t_ms(lambda: LIB.mc_qr(a_, 0, q_, r_, ws_, s))
    t_ref = t_ms(lambda: torch.linalg.qr(a))
    flops = batch * 2 * (2 * m * n * k - 2 * k ** 3 / 3)
    return (f"| {batch}×{m}×{n} | {t_mc:.3f} | {flops / t_mc / 1e6:.0f} | {t_ref:.3f} | "
            f"{flops / t_ref / 1e6:.0f} | {t_ref / t_mc:.1f}× |")


def rows_section(emit):
    emit("| op | dtype | shape | metalcore ms | GB/s | % of copy | torch ms | vs torch |")
    emit("|---|---|---|---:|---:|---:|---:|---:|")
    for dtype in (torch.bfloat16, torch.float32):
        for rows, cols in SHAPES:
            size = rows * cols * torch.tensor([], dtype=dtype).element_size()
            copy = {}
            for name, tensors, mc, ref in cases(dtype, rows, cols):
                if os.environ.get("BENCH_ROWS", "") not in f"{name} {str(dtype)[6:]} {rows}x{cols}":
                    continue
                nbytes = tensors * size
                if tensors not in copy:
                    copy[tensors] = copy_ms(nbytes // 2)
                t_mc, t_ref = t_ms(mc), t_ms(ref)
                gbs = nbytes / t_mc / 1e6
                emit(f"| {name} | {str(dtype)[6:]} | {rows}×{cols} | {t_mc:.3f} | {gbs:.0f} | "
                     f"{100 * copy[tensors] / t_mc:.0f}% | {t_ref:.3f} | {t_ref / t_mc:.2f}× |")


def adamw_section(emit):
    emit("AdamW, one step: bytes per parameter = param read+write, grad read, both moments read+write "
         "(float32 28 B, bfloat16 params 22 B); torch is `torch.optim.AdamW(fused=True)` on the same tensors. "
         "`graph` is the same metalcore call captured in a CUDA graph and replayed: the GPU's time alone, "
         "without the host's (validating 5,000 tensors on this machine's host takes longer than the GPU's work).")
    emit("")
    emit("| params dtype | parameters | tensors | metalcore ms | GB/s | % of copy | graph ms | graph % of copy "
         "| torch fused ms | vs torch |")
    emit("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for dtype in (torch.bfloat16, torch.float32):
        for tensors in (50, 5000):
            emit(adamw_row(dtype, 194_000_000, tensors))


def qr_section(emit):
    emit("QR, float32, reduced mode (q and r), against `torch.linalg.qr` (cuSOLVER) on the same input; "
         "GFLOP/s counts 2mnk - 2k³/3 for r and as much again for forming q (k = min(m, n)).")
    emit("")
    emit("| batch×m×n | metalcore ms | GFLOP/s | torch ms | torch GFLOP/s | vs torch |")
    emit("|---|---:|---:|---:|---:|---:|")
    for shape in ((10000, 32, 32), (2000, 128, 128), (100, 512, 512), (1, 4096, 4096), (1, 8192, 1024)):
        emit(qr_row(*shape))


def host_section(emit):
    per, ctypes_us, torch_us = call_overhead()
    emit(f"Host time per call, silu on a 4×64 tensor (median of batches of 200 calls, the queue drained between "
         f"batches): {per:.2f} µs through ctypes, of which ctypes itself (a call of mc_version) {ctypes_us:.2f} µs: "
         f"about {per - ctypes_us:.2f} µs in metalcore and the driver. PyTorch's own silu (out=) on the same "
         f"tensors: {torch_us:.2f} µs.")


SECTIONS = {"rows": rows_section, "adamw": adamw_section, "qr": qr_section, "host": host_section}


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else None
    emit = Report()
    check("cuda_prepare", 0)
    emit("# CUDA backend benchmark")
    emit("")
    emit(f"{torch.cuda.get_device_name()}, PyTorch {torch.__version__}. GB/s counts bytes read plus written; "
         "`copy` is a device-to-device copy of a float32 buffer of the same bytes, timed in the same run; "
         "medians of CUDA-event timings (triton `do_bench`). torch bwd for the norms is autograd's backward "
         "(weight gradient included).")
    for name in sys.argv[2:] or SECTIONS:
        emit("")
        SECTIONS[name](emit)
    emit.save(out)


main()
