"""Python shim overhead and a small model with and without the overrides (CPU).
Run from the repository root: python3 bench/python_bench.py [out.md]"""
import sys
import time

import torch
import torch.nn.functional as F

from report import Report  # the scripts' shared table

sys.path.insert(0, "overrides/python")
sys.path.insert(0, "overrides/python/tests")
import metalcore  # noqa: E402
from test_overrides import Tiny  # noqa: E402


def per_call_us(fn, n=20000):
    for _ in range(1000):
        fn()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n * 1e6


def step_ms(model, data, n=20):
    def step():
        loss = F.cross_entropy(model(data).reshape(-1, 50), data.reshape(-1))
        loss.backward()
    for _ in range(3):
        step()
    t0 = time.perf_counter()
    for _ in range(n):
        step()
    return (time.perf_counter() - t0) / n * 1e3


def main():
    emit = Report()

    torch.manual_seed(0)
    tiny = torch.randn(8, 8)
    orig = per_call_us(lambda: F.gelu(tiny))
    with metalcore.pytorch_overrides(ops=["gelu"]):
        patched = per_call_us(lambda: F.gelu(tiny))
    emit("# Python shim benchmark (CPU)")
    emit("")
    emit(f"PyTorch {torch.__version__}, {torch.get_num_threads()} threads, metalcore {metalcore.__version__}.")
    emit("")
    emit("| what | PyTorch | metalcore override | ratio |")
    emit("|---|---:|---:|---:|")
    emit(f"| `F.gelu` on an 8×8 float32 tensor, µs per call | {orig:.2f} | {patched:.2f} | {patched / orig:.2f}× |")
    model = Tiny()
    data = torch.randint(0, 50, (64, 128))
    plain = step_ms(model, data)
    with metalcore.pytorch_overrides():
        over = step_ms(model, data)
    emit(f"| small model (embedding → LayerNorm → Linear → GELU → softmax attention → SiLU), batch 64×128, "
         f"forward+backward ms | {plain:.1f} | {over:.1f} | {over / plain:.2f}× |")
    emit.save(sys.argv[1] if len(sys.argv) > 1 else None)


main()
