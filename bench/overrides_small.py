"""Where the CUDA overrides leave a call to PyTorch: GPU and host time per
call of the norms, softmax and activations on bfloat16 inputs from 512 bytes
to 8 MiB, metalcore's public functions against PyTorch's ops
(bench/overrides_small.md; the threshold is _overrides.SMALL_CUDA_BYTES).

    python3 bench/overrides_small.py > bench/overrides_small.md

GPU time: 50 calls captured in a CUDA graph, replayed (no host work), the
median of 15 replays timed with CUDA events. Host time: the median of 15
rounds of the mean of 200 back-to-back calls, PyTorch's and metalcore's
rounds alternating. Forward, no gradient wanted."""
import statistics

import torch
import torch.nn.functional as F

import harness
import metalcore
from metalcore import _overrides

SHAPES = [(4, 64), (1, 4096), (16, 1024), (16, 4096), (256, 1024), (64, 4096), (1024, 1024), (256, 4096),
          (4096, 1024), (1024, 4096)]
GRAPH_CALLS, REPLAYS, ROUNDS, HOST_CALLS = 50, 15, 15, 200


def gpu_us(fn):
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up outside the capture, as CUDA graphs require
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(GRAPH_CALLS):
            fn()
    graph.replay()
    times = []
    for _ in range(REPLAYS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / GRAPH_CALLS)
    return statistics.median(times)


def ops(x, w, b):
    cols = x.shape[-1]
    out = [("softmax", lambda: metalcore.softmax(x), lambda: F.softmax(x, -1)),
           ("gelu", lambda: metalcore.gelu(x), lambda: F.gelu(x)),
           ("silu", lambda: metalcore.silu(x), lambda: F.silu(x)),
           ("layer_norm", lambda: metalcore.layer_norm(x, w, b), lambda: F.layer_norm(x, (cols,), w, b))]
    if hasattr(F, "rms_norm"):
        out.append(("rms_norm", lambda: metalcore.rms_norm(x, w), lambda: F.rms_norm(x, (cols,), w, 1e-6)))
    return out


def main():
    limit = _overrides.SMALL_CUDA_BYTES
    print("# Small CUDA inputs: where the overrides leave a call to PyTorch\n")
    print(f"metalcore {metalcore.__version__}, PyTorch {torch.__version__}, {torch.cuda.get_device_name()}; "
          "`python3 bench/overrides_small.py`. Microseconds per call, bfloat16, forward. GPU: 50 calls in a CUDA "
          "graph, replayed (median of 15 replays). Host: back-to-back calls (median of 15 rounds of 200, "
          "alternating). The overrides send an input below "
          f"{limit >> 20} MiB to PyTorch's op (`SMALL_CUDA_BYTES`); metalcore's public functions always compute.\n")
    print("| op | shape | KiB | GPU PyTorch | GPU metalcore | host PyTorch | host metalcore | override takes |")
    print("|---|---|---:|---:|---:|---:|---:|---|")
    torch.manual_seed(0)
    with torch.no_grad():
        for rows, cols in SHAPES:
            x = torch.randn(rows, cols, device="cuda", dtype=torch.bfloat16)
            w, b = torch.randn(cols, device="cuda", dtype=x.dtype), torch.randn(cols, device="cuda", dtype=x.dtype)
            nbytes = x.numel() * x.element_size()
            for name, ours, theirs in ops(x, w, b):
                h_ours, h_theirs = harness.paired_us(ours, theirs, HOST_CALLS, ROUNDS, "cuda")
                print(f"| {name} | {rows}x{cols} | {nbytes / 1024:.1f} | {gpu_us(theirs):.2f} | {gpu_us(ours):.2f} | "
                      f"{h_theirs:.1f} | {h_ours:.1f} | {'PyTorch' if nbytes < limit else 'metalcore'} |")


if __name__ == "__main__":
    main()
