"""Two builds of the library against each other on the CPU, through the
public Python API, their processes alternating (bench/cpu-pool.md):

    python3 bench/cpu_pool.py A.so B.so [rounds] > bench/cpu-pool.md

Each process times every case (microseconds: the median of 9 rounds of
back-to-back calls) at the library's default thread count, PyTorch at the
same; a case's figure for a build is the median over its processes. The
cases: the row kernels (LayerNorm forward and backward with the weight's
and bias's gradients, SiLU, softmax) on float32 rows of 1024, a SiLU
followed by one of PyTorch's parallel ops (a 256 x 256 matmul, whose BLAS
threads then want the cores), the same with PyTorch's own SiLU, the
nn.LayerNorm module's forward + backward through autograd, and batched
linear algebra."""
import os
import statistics
import subprocess
import sys


def cases():
    import torch
    import harness
    import metalcore
    from metalcore import _kernels
    us = harness.per_call_us
    torch.set_num_threads(metalcore.cpu_threads())
    torch.manual_seed(0)
    out = {}
    module = metalcore.nn.LayerNorm(1024)
    for rows in (64, 256, 1024):
        x, dy = torch.randn(rows, 1024), torch.randn(rows, 1024)
        w, b = torch.randn(1024), torch.randn(1024)
        _, stats = _kernels.layer_norm(x, w, b, 1e-5, True)
        a, c = torch.randn(256, 256), torch.randn(256, 256)
        n = max(50, 2_000_000 // (rows * 1024))
        out[f"layer_norm forward {rows} x 1024"] = us(lambda: metalcore.layer_norm(x, w, b), n)
        out[f"layer_norm backward {rows} x 1024"] = us(
            lambda: _kernels.layer_norm_backward(dy, x, w, stats, True, True), n)
        out[f"silu {rows} x 1024"] = us(lambda: metalcore.silu(x), n)
        out[f"softmax {rows} x 1024"] = us(lambda: metalcore.softmax(x), n)
        out[f"silu, then a 256 x 256 torch.mm, {rows} x 1024"] = us(lambda: (metalcore.silu(x), torch.mm(a, c)), n)
        out[f"PyTorch's silu, then a 256 x 256 torch.mm, {rows} x 1024"] = us(
            lambda: (torch.nn.functional.silu(x), torch.mm(a, c)), n)
        xg = x.clone().requires_grad_()
        out[f"nn.LayerNorm forward + backward, {rows} x 1024"] = us(lambda: module(xg).backward(dy), n)
    # the small CPU Llama step's (bench/e2e.md) MLP and rotary shapes
    gate, up = torch.randn(2, 128, 688, requires_grad=True), torch.randn(2, 128, 688, requires_grad=True)
    dglu = torch.randn(2, 128, 688)
    out["swiglu forward + backward, 256 x 688"] = us(lambda: metalcore.swiglu(gate, up).backward(dglu), 200)
    q = torch.randn(2, 128, 4, 64).transpose(1, 2).requires_grad_()
    k = torch.randn(2, 128, 4, 64).transpose(1, 2).requires_grad_()
    cos, sin = torch.randn(2, 128, 64), torch.randn(2, 128, 64)
    out["rope forward + backward, q and k 2 x 4 x 128 x 64"] = us(
        lambda: torch.autograd.backward(metalcore.rope(q, k, cos, sin), (q.detach(), k.detach())), 200)
    spd = torch.randn(10000, 32, 32)
    spd = spd @ spd.mT / 32 + torch.eye(32)
    g, sq = torch.randn(2000, 32, 32), torch.randn(1000, 64, 64)
    out["cholesky_ex 10000 x 32²"] = us(lambda: metalcore.linalg.cholesky_ex(spd), 5)
    out["svd 2000 x 32²"] = us(lambda: metalcore.linalg.svd(g, full_matrices=False), 3)
    out["qr 1000 x 64²"] = us(lambda: metalcore.linalg.qr(sq), 3)
    return out


def main():
    if sys.argv[1] == "--child":
        for k, v in cases().items():
            print(f"{k}\t{v}")
        return
    builds, rounds = sys.argv[1:3], int(sys.argv[3]) if len(sys.argv) > 3 else 3
    got = {b: {} for b in builds}
    for _ in range(rounds):
        for b in builds:
            env = dict(os.environ, METALCORE_LIBRARY=b)
            out = subprocess.run([sys.executable, __file__, "--child"], env=env, check=True, capture_output=True,
                                 text=True).stdout
            for line in out.splitlines():
                k, v = line.split("\t")
                got[b].setdefault(k, []).append(float(v))
    import torch
    import metalcore
    print("# Two builds of the library on the CPU\n")
    print(f"metalcore {metalcore.__version__}, PyTorch {torch.__version__}, {os.cpu_count()} CPUs, "
          f"`python3 bench/cpu_pool.py A.so B.so {rounds}`: microseconds, the median over {rounds} "
          "alternating processes of each process's median; speed is A's time over B's.\n")
    a, b = builds
    print("| case | A µs | B µs | speed |")
    print("|---|---:|---:|---:|")
    for k in got[a]:
        ta, tb = statistics.median(got[a][k]), statistics.median(got[b][k])
        print(f"| {k} | {ta:.0f} | {tb:.0f} | {ta / tb:.2f} |")


if __name__ == "__main__":
    main()
