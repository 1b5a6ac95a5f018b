"""Host time of a call that comes after other host work, as a model's calls
come, against back-to-back calls (bench/spaced_calls.md).

    python3 bench/spaced_calls.py [cpu|cuda ...] > bench/spaced_calls.md

How it measures: METHOD below, printed with the table."""
import ctypes
import resource
import statistics
import time

import torch
import torch.nn.functional as F

import harness
import metalcore
from metalcore import _lib

GAPS_US = (0, 50, 200, 1000, 5000)
ROUNDS = 5
METHOD = ("Before each timed call the host spins for the gap (Python busy work, no sleep); only the call is "
          f"timed. Each figure is the median over {ROUNDS} rounds of the median of 200 calls (100 at the longest gap), "
          "the rows of a gap taking their rounds in turn. A C function through ctypes (libc's labs) is the "
          "reference for what the gap alone costs a call (caches, ctypes); mc_cpu_threads is the library's "
          "cheapest entry, into Go and straight back. Context switches: the process's, all threads, per call "
          "(getrusage). The silu rows: 4 x 64 tensors, float32 on the CPU and bfloat16 on CUDA, through the "
          "public API and PyTorch's own.")


def spaced_us(fn, gap_us, calls):
    """The median host time of calls calls of fn, each after gap_us of
    busy work, and the process's context switches per call."""
    clock = time.perf_counter
    gap = gap_us * 1e-6
    times = []
    before = resource.getrusage(resource.RUSAGE_SELF)
    for _ in range(calls):
        end = clock() + gap
        while clock() < end:
            pass
        start = clock()
        fn()
        times.append(clock() - start)
    after = resource.getrusage(resource.RUSAGE_SELF)
    switches = (after.ru_nvcsw + after.ru_nivcsw - before.ru_nvcsw - before.ru_nivcsw) / calls
    return statistics.median(times) * 1e6, switches


def table(fns):
    """{gap: [(us, switches) per function]}, the functions of a gap in turn
    (harness.interleaved)."""
    out = {}
    for gap in GAPS_US:
        calls = 100 if gap >= 5000 else 200
        runs = harness.interleaved(fns, ROUNDS, lambda fn: spaced_us(fn, gap, calls))
        out[gap] = [(statistics.median(u for u, _ in r), statistics.median(s for _, s in r)) for r in runs]
    return out


def entry_table():
    libc = ctypes.CDLL("libc.so.6")
    libc.labs.restype, libc.labs.argtypes = ctypes.c_long, [ctypes.c_long]
    noop = _lib.lib.mc_cpu_threads
    res = table([lambda: libc.labs(-3), noop])
    print("## Into the library and back\n")
    print("| gap µs | C function via ctypes µs | metalcore's mc_cpu_threads µs | its context switches per call |")
    print("|---:|---:|---:|---:|")
    for gap, ((c, _), (go, sw)) in res.items():
        print(f"| {gap} | {c:.2f} | {go:.2f} | {sw:.2f} |")
    print()


def silu_table(device):
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    x = torch.randn(4, 64, device=device, dtype=dtype)
    res = table([lambda: metalcore.silu(x), lambda: F.silu(x)])
    print(f"## silu, {harness.on(device)}\n")
    print("| gap µs | metalcore.silu µs | PyTorch F.silu µs | ratio |")
    print("|---|---:|---:|---:|")
    for gap, ((ours, _), (theirs, _)) in res.items():
        print(f"| {gap} | {ours:.2f} | {theirs:.2f} | {theirs / ours:.2f} |")
    print()


def main():
    print("# Calls spaced by other host work\n")
    print(f"metalcore {metalcore.__version__}, PyTorch {torch.__version__}, `python3 bench/spaced_calls.py`. "
          f"{METHOD}\n")
    entry_table()
    for device in harness.devices():
        silu_table(device)


if __name__ == "__main__":
    main()
