"""The norms and softmax on large bfloat16 tensors through metalcore's
public functions against PyTorch's, forward and forward + backward, on CUDA
(bench/python_ops.md).

    python3 bench/python_ops.py > bench/python_ops.md

Each cell is the median of 7 rounds of 50 back-to-back calls timed with CUDA
events (the host's work included, as a model sees it). Bar (issue 34):
metalcore >= 1.0x PyTorch at every shape, forward and forward + backward."""
import statistics

import torch
import torch.nn.functional as F

import metalcore

SHAPES = [(4096, 8192), (16384, 4096), (65536, 1024)]
ROUNDS, CALLS = 7, 50


def ms(fn):
    fn()
    times = []
    for _ in range(ROUNDS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        for _ in range(CALLS):
            fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / CALLS)
    return statistics.median(times)


def torch_rms_norm(x, w):
    return F.rms_norm(x, x.shape[-1:], w, 1e-6)


def ops(x, w, b):
    return [("rms_norm", lambda x: metalcore.rms_norm(x, w, 1e-6), lambda x: torch_rms_norm(x, w)),
            ("layer_norm", lambda x: metalcore.layer_norm(x, w, b), lambda x: F.layer_norm(x, x.shape[-1:], w, b)),
            ("softmax", lambda x: metalcore.softmax(x), lambda x: F.softmax(x, -1))]


def main():
    print("# Norms and softmax through the public functions (CUDA, bfloat16)\n")
    print(f"metalcore {metalcore.__version__}, PyTorch {torch.__version__}, {torch.cuda.get_device_name()}; "
          f"`python3 bench/python_ops.py`. Milliseconds per call (median of {ROUNDS} rounds of {CALLS} calls); "
          "speed is PyTorch's time over metalcore's. Forward + backward: the forward, then backward of a "
          "fixed gradient, with weight and bias gradients.\n")
    print("| op | shape | fwd PyTorch | fwd metalcore | fwd speed | fwd+bwd PyTorch | fwd+bwd metalcore | fwd+bwd speed |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for shape in SHAPES:
        torch.manual_seed(0)
        x = torch.randn(shape, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        w = torch.randn(shape[-1], device="cuda", dtype=torch.bfloat16, requires_grad=True)
        b = torch.randn(shape[-1], device="cuda", dtype=torch.bfloat16, requires_grad=True)
        dy = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
        for name, ours, theirs in ops(x, w, b):
            with torch.no_grad():
                fwd = [ms(lambda f=f: f(x)) for f in (theirs, ours)]
            both = [ms(lambda f=f: f(x).backward(dy)) for f in (theirs, ours)]
            print(f"| {name} | {shape[0]}x{shape[1]} | {fwd[0]:.3f} | {fwd[1]:.3f} | {fwd[0] / fwd[1]:.2f} | "
                  f"{both[0]:.3f} | {both[1]:.3f} | {both[0] / both[1]:.2f} |")


if __name__ == "__main__":
    main()
