"""The norms and softmax on large bfloat16 tensors through metalcore's
public functions against PyTorch's, forward and forward + backward, on CUDA
(bench/python_ops.md).

    python3 bench/python_ops.py > bench/python_ops.md

Each cell is the median of 7 rounds of 50 back-to-back calls timed with CUDA
events (the host's work included, as a model sees it), PyTorch's and
metalcore's rounds alternating. The copy column is the forward's bytes (the
input read, the output written) copied with 4-byte elements, the bandwidth
a forward can reach. Bar (issue 34): metalcore >= 1.0x PyTorch at the first
three shapes, forward and forward + backward. A second table has softmax
on short rows, bfloat16 and float32 (64 MiB of rows each): the widths where
the short-rows kernels run and where the overrides leave softmax to
PyTorch."""
import statistics

import torch
import torch.nn.functional as F

import metalcore

SHAPES = [(4096, 8192), (16384, 4096), (65536, 1024), (131072, 512), (262144, 256)]
# softmax forward on short rows (a MoE router's, a short attention's), their
# widths; 64 MiB of rows each
SHORT = [8, 16, 64, 128, 256, 7, 100, 197]
ROUNDS, CALLS = 7, 50


def ms(*fns):
    """Each fn's milliseconds per call, their rounds alternating."""
    times = [[] for _ in fns]
    for fn in fns:
        fn()
    for _ in range(ROUNDS):
        for fn, out in zip(fns, times):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            start.record()
            for _ in range(CALLS):
                fn()
            end.record()
            torch.cuda.synchronize()
            out.append(start.elapsed_time(end) / CALLS)
    return [statistics.median(t) for t in times]


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
          "speed is PyTorch's time over metalcore's. Copy: the forward's bytes (input read, output written) "
          "copied with 4-byte elements, in the same rounds as the forwards. Forward + backward: the forward, "
          "then backward of a fixed gradient, with weight and bias gradients.\n")
    print("| op | shape | copy | fwd PyTorch | fwd metalcore | fwd speed | fwd+bwd PyTorch | fwd+bwd metalcore "
          "| fwd+bwd speed |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for shape in SHAPES:
        torch.manual_seed(0)
        x = torch.randn(shape, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        w = torch.randn(shape[-1], device="cuda", dtype=torch.bfloat16, requires_grad=True)
        b = torch.randn(shape[-1], device="cuda", dtype=torch.bfloat16, requires_grad=True)
        dy = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
        src = torch.empty(x.numel() // 2, device="cuda", dtype=torch.float32)  # x's bytes
        dst = torch.empty_like(src)
        for name, ours, theirs in ops(x, w, b):
            with torch.no_grad():
                copy, *fwd = ms(lambda: dst.copy_(src), lambda: theirs(x), lambda: ours(x))
            both = ms(lambda: theirs(x).backward(dy), lambda: ours(x).backward(dy))
            print(f"| {name} | {shape[0]}x{shape[1]} | {copy:.3f} | {fwd[0]:.3f} | {fwd[1]:.3f} | "
                  f"{fwd[0] / fwd[1]:.2f} | {both[0]:.3f} | {both[1]:.3f} | {both[0] / both[1]:.2f} |")


def short_rows():
    print("\n## softmax on short rows\n")
    print("Rows of at most 512 bytes take kernels of several rows a warp, longer rows the kernels of a block a row. "
          "Same rounds and columns as above.\n")
    print("| dtype | shape | copy | fwd PyTorch | fwd metalcore | fwd speed | fwd+bwd PyTorch | fwd+bwd metalcore "
          "| fwd+bwd speed |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for dtype in (torch.bfloat16, torch.float32):
        for cols in SHORT:
            rows = (64 << 20) // (cols * dtype.itemsize)
            x = torch.randn(rows, cols, device="cuda", dtype=dtype, requires_grad=True)
            dy = torch.randn_like(x)
            src = torch.empty(x.numel() * dtype.itemsize // 4, device="cuda", dtype=torch.float32)
            dst = torch.empty_like(src)
            with torch.no_grad():
                copy, *fwd = ms(lambda: dst.copy_(src), lambda: F.softmax(x, -1), lambda: metalcore.softmax(x))
            both = ms(lambda: F.softmax(x, -1).backward(dy), lambda: metalcore.softmax(x).backward(dy))
            print(f"| {str(dtype)[6:]} | {rows}x{cols} | {copy:.3f} | {fwd[0]:.3f} | {fwd[1]:.3f} | "
                  f"{fwd[0] / fwd[1]:.2f} | {both[0]:.3f} | {both[1]:.3f} | {both[0] / both[1]:.2f} |")


if __name__ == "__main__":
    main()
    short_rows()
