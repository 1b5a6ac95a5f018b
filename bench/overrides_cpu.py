"""Which overrides are on by default on the CPU: each patched function
against PyTorch's own through the public API, at the same thread count,
forward and forward + backward (bench/overrides_cpu.md).

    python3 bench/overrides_cpu.py > bench/overrides_cpu.md

Shapes: a mid-size activation (8192 x 1024) and a tiny one (4 x 64), float32
and bfloat16. Each cell is PyTorch's time over metalcore's (above 1:
metalcore faster), the median of 5 rounds. An op is on by default for a
dtype where it is faster at mid size forward and forward + backward
(metalcore.DEFAULTS); the tiny column is what a small call pays."""

import torch
import torch.nn.functional as F

import harness
import metalcore

ORIGINAL = {n: getattr(F, n) for n in ("layer_norm", "softmax", "gelu", "silu")}
ORIGINAL["rms_norm"] = getattr(F, "rms_norm", None)


def call(op, fns, x, w, b):
    f = fns[op]
    if op == "layer_norm":
        return f(x, x.shape[-1:], w, b)
    if op == "rms_norm":
        return f(x, x.shape[-1:], w, 1e-6)
    if op == "softmax":
        return f(x, -1)
    return f(x)


def main():
    harness.on("cpu")
    threads = torch.get_num_threads()
    print("# The CPU overrides against PyTorch, through the public API\n")
    print(f"metalcore {metalcore.__version__}, PyTorch {torch.__version__}, both at {threads} threads; "
          "`python3 bench/overrides_cpu.py`. PyTorch's time over the patched function's (above 1: metalcore "
          "faster); tiny: host time per call in µs, PyTorch / metalcore.\n")
    print("| op | dtype | fwd 8192x1024 | fwd+bwd 8192x1024 | tiny 4x64 µs |")
    print("|---|---|---:|---:|---:|")
    ops = ["rms_norm", "layer_norm", "softmax", "gelu", "silu"]
    if ORIGINAL["rms_norm"] is None:
        ops.remove("rms_norm")
        print("| rms_norm | | this PyTorch has no F.rms_norm to override | | |")
    for op in ops:
        for dtype in (torch.float32, torch.bfloat16):
            torch.manual_seed(0)
            x = torch.randn(8192, 1024, dtype=dtype, requires_grad=True)
            w = torch.randn(1024, dtype=dtype, requires_grad=True)
            b = torch.randn(1024, dtype=dtype, requires_grad=True)
            dy = torch.randn_like(x)
            tiny = torch.randn(4, 64, dtype=dtype)
            tw, tb = w[:64].detach(), b[:64].detach()
            cells = []
            for with_grad in (False, True):
                def step(fns):
                    if with_grad:
                        call(op, fns, x, w, b).backward(dy)
                    else:
                        with torch.no_grad():
                            call(op, fns, x, w, b)
                theirs = harness.per_call_us(lambda: step(ORIGINAL), 5, 5)
                with metalcore.pytorch_overrides([op]):
                    patched = {n: getattr(F, n, None) for n in ORIGINAL}
                    ours = harness.per_call_us(lambda: step(patched), 5, 5)
                cells.append(f"{theirs / ours:.2f}")
            t_theirs = harness.per_call_us(lambda: call(op, ORIGINAL, tiny, tw, tb), 2000, 5)
            with metalcore.pytorch_overrides([op]):
                patched = {n: getattr(F, n, None) for n in ORIGINAL}
                t_ours = harness.per_call_us(lambda: call(op, patched, tiny, tw, tb), 2000, 5)
            print(f"| {op} | {str(dtype)[6:]} | {cells[0]} | {cells[1]} | {t_theirs:.1f} / {t_ours:.1f} |")


if __name__ == "__main__":
    main()
