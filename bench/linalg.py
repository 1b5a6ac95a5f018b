"""Batched small-matrix linear algebra through metalcore.linalg against
torch.linalg on the same inputs in the same run (bench/linalg.md):

    python3 bench/linalg.py [cpu|cuda ...] > bench/linalg.md

Cholesky (cholesky_ex, float32) of B Bᵀ/n + I at issue 32's shapes. On the
CPU metalcore runs on its threads and PyTorch (LAPACK underneath) at the
faster of 1 thread and as many as metalcore's; on CUDA PyTorch is cuSOLVER
or MAGMA. Each time is the median of 5 timed calls (20 on CUDA, 50 for a single
CPU matrix) after a warm-up, outputs allocated by the call as a user's are. Error: the largest
||L Lᵀ - A|| / ||A|| over the batch, in float64, for each side's factor.
Solve (solve_ex, float32, one right-hand side) of A = N(0, 1) + 2 sqrt(n) I
at the same shapes; error: the largest ||A x - b|| / (||A|| ||x||) over the
batch.
Eigendecomposition (eigh, float32, eigenvectors included) of symmetric
N(0, 1) matrices; error: the largest ||A V - V diag(w)|| / ||A|| and
||Vᵀ V - I|| over the batch (the larger of the two).
SVD (svd, float32, thin, vectors included) of N(0, 1) matrices; error: the
largest of ||A - U diag(s) Vh|| / ||A||, ||Uᵀ U - I|| and ||Vh Vhᵀ - I||
over the batch."""
import torch

import harness
import metalcore

CHOLESKY = [(10000, 16), (10000, 32), (2000, 64), (500, 128)]
SOLVE = CHOLESKY
# on the CPU also single matrices, which the overrides send to metalcore from order 48
EIGH = {"cpu": [(5000, 16), (10000, 32), (1000, 64), (200, 128), (1, 32), (1, 48), (1, 128)],
        "cuda": [(5000, 16), (10000, 32), (1000, 64), (100, 128)]}
SVD = {"cpu": [(2000, 32, 32), (1000, 64, 16), (1000, 64, 64), (100, 128, 128), (1, 32, 32), (1, 48, 48),
               (1, 128, 128)],
       "cuda": [(2000, 32, 32), (1000, 64, 16), (1000, 64, 64), (100, 128, 128)]}
# small CUDA batches, where a warp or block a matrix meets PyTorch's batch
# (the overrides' thresholds, _overrides._eigh_fewest and _SVD_FEWEST)
SMALL = ([8, 16, 32, 64, 128], [1, 2, 4, 8, 16, 32, 64, 128])


def reconstruction(l, a):
    l, a = l.double(), a.double()
    return ((l @ l.mT - a).flatten(1).norm(dim=1) / a.flatten(1).norm(dim=1)).max().item()


def residual(x, a, b):
    x, a, b = x.double(), a.double(), b.double()
    return ((a @ x - b).flatten(1).norm(dim=1) / (a.flatten(1).norm(dim=1) * x.flatten(1).norm(dim=1))).max().item()


def decomposition(w, v, a):
    w, v, a = w.double(), v.double(), a.double()
    n = a.shape[-1]
    res = (a @ v - v * w.unsqueeze(-2)).flatten(1).norm(dim=1) / a.flatten(1).norm(dim=1)
    orth = (v.mT @ v - torch.eye(n, dtype=torch.float64, device=a.device)).flatten(1).norm(dim=1)
    return max(res.max().item(), orth.max().item())


def singular(u, s, vh, a):
    u, s, vh, a = u.double(), s.double(), vh.double(), a.double()
    eye = torch.eye(s.shape[-1], dtype=torch.float64, device=a.device)
    res = ((u * s.unsqueeze(-2)) @ vh - a).flatten(1).norm(dim=1) / a.flatten(1).norm(dim=1)
    return max(res.max().item(), (u.mT @ u - eye).flatten(1).norm(dim=1).max().item(),
               (vh @ vh.mT - eye).flatten(1).norm(dim=1).max().item())


def row(name, shape, theirs, ours, error, device, rounds):
    """A table row: PyTorch's call and metalcore's on the same inputs, and
    error(result) of each."""
    t_theirs, threads = pytorch_time(theirs, device, rounds)
    t_ours = harness.timed(ours, device, rounds)
    print(f"| {name} | {shape} | {t_theirs:.3f}{threads} | {t_ours:.3f} | {t_theirs / t_ours:.2f} | "
          f"{error(theirs()):.1e} | {error(ours()):.1e} |")


def decomposition_rounds(device, batch, n, rounds):
    """Timed calls for eigh or svd of a batch of order n: more for a single
    CPU matrix (a short call), a few on CUDA beyond order 32, where PyTorch
    loops over the batch."""
    if device == "cpu":
        return 50 if batch == 1 else rounds
    return rounds if n <= 32 else 3


def pytorch_time(fn, device, rounds):
    """PyTorch's time and its thread count: on the CPU the faster of one
    thread and metalcore's count."""
    if device != "cpu":
        return harness.timed(fn, device, rounds), ""
    best = None
    for threads in sorted({1, metalcore.cpu_threads()}):
        torch.set_num_threads(threads)
        t = harness.timed(fn, device, rounds)
        if best is None or t < best[0]:
            best = (t, f" ({threads} thread{'s' if threads > 1 else ''})")
    torch.set_num_threads(metalcore.cpu_threads())
    return best


def main():
    print("# Batched small-matrix linear algebra\n")
    print(f"metalcore {metalcore.__version__}, PyTorch {torch.__version__}; `python3 bench/linalg.py`. Milliseconds, "
          "median of 5 calls (20 on CUDA, 50 for a single CPU matrix); speed is PyTorch's time over metalcore's; error is the largest "
          "||L Lᵀ - A|| / ||A|| (Cholesky), ||A x - b|| / (||A|| ||x||) (solve), or the larger of "
          "||A V - V diag(w)|| / ||A|| and ||Vᵀ V - I|| (eigh), or the largest of ||A - U diag(s) Vh|| / ||A||, ||Uᵀ U - I|| "
          "and ||Vh Vhᵀ - I|| (svd) over the batch. Bars (issue 32): Cholesky and solve "
          "10000 x 32² >= 3x on the CPU and >= 2x on the H100, >= 1.0x elsewhere up to n = 128; eigh 5000 x 16² "
          ">= 5x and 200 x 128² >= 2x on the CPU, >= 3x at n <= 32 and >= 20x at n = 64 to 128 on the H100; SVD "
          "2000 x 32² >= 5x and 100 x 128² >= 2x on the CPU, >= 3x at n <= 32 and >= 20x at n = 64 to 128 (tall "
          "shapes included) on the H100. On the CPU metalcore.linalg leaves eigh past order 128 and SVD past "
          "min(m, n) = 256 to PyTorch.\n")
    for device in harness.devices(cpu_first=True):
        where = harness.on(device)
        rounds = 20 if device == "cuda" else 5
        print(f"## {device} ({where})\n")
        print("| op | shape | PyTorch ms | metalcore ms | speed | PyTorch error | metalcore error |")
        print("|---|---|---:|---:|---:|---:|---:|")
        for batch, n in CHOLESKY:
            gen = torch.Generator().manual_seed(n)
            b = torch.randn(batch, n, n, generator=gen, dtype=torch.float64)
            a = (b @ b.mT / n + torch.eye(n, dtype=torch.float64)).float().to(device)
            row("cholesky_ex", f"{batch} x {n} x {n}", lambda: torch.linalg.cholesky_ex(a),
                lambda: metalcore.linalg.cholesky_ex(a), lambda r: reconstruction(r[0], a), device, rounds)
        for batch, n in SOLVE:
            gen = torch.Generator().manual_seed(n)
            a = (torch.randn(batch, n, n, generator=gen) + 2 * n ** 0.5 * torch.eye(n)).to(device)
            rhs = torch.randn(batch, n, 1, generator=gen).to(device)
            row("solve_ex", f"{batch} x {n} x {n}, 1 rhs", lambda: torch.linalg.solve_ex(a, rhs),
                lambda: metalcore.linalg.solve_ex(a, rhs), lambda r: residual(r[0], a, rhs), device, rounds)
        for batch, n in EIGH[device]:
            gen = torch.Generator().manual_seed(n)
            b = torch.randn(batch, n, n, generator=gen)
            a = (b + b.mT).to(device)
            r = decomposition_rounds(device, batch, n, rounds)
            row("eigh", f"{batch} x {n} x {n}", lambda: torch.linalg.eigh(a), lambda: metalcore.linalg.eigh(a),
                lambda r: decomposition(r[0], r[1], a), device, r)
        for batch, m, n in SVD[device]:
            gen = torch.Generator().manual_seed(m + n)
            a = torch.randn(batch, m, n, generator=gen).to(device)
            r = decomposition_rounds(device, batch, max(m, n), rounds)
            row("svd", f"{batch} x {m} x {n}", lambda: torch.linalg.svd(a, full_matrices=False),
                lambda: metalcore.linalg.svd(a), lambda r: singular(r[0], r[1], r[2], a), device, r)
        print()
        if device == "cuda":
            small_batches(device, "eigh", lambda a: a + a.mT, torch.linalg.eigh, metalcore.linalg.eigh)
            small_batches(device, "svd", lambda a: a, lambda a: torch.linalg.svd(a, full_matrices=False),
                          metalcore.linalg.svd)


def small_batches(device, name, make, theirs, ours):
    """name on small CUDA batches of make(N(0, 1) matrices): PyTorch's time
    and metalcore's."""
    print(f"### {device}: {name} on small batches\n")
    print("| n | batch | PyTorch ms | metalcore ms | speed |")
    print("|---:|---:|---:|---:|---:|")
    orders, batches = SMALL
    for n in orders:
        for batch in batches:
            gen = torch.Generator().manual_seed(n + batch)
            a = make(torch.randn(batch, n, n, generator=gen)).to(device)
            rounds = 5 if n > 32 else 10
            t = harness.timed(lambda: theirs(a), device, rounds)
            o = harness.timed(lambda: ours(a), device, rounds)
            print(f"| {n} | {batch} | {t:.3f} | {o:.3f} | {t / o:.2f} |")
    print()


if __name__ == "__main__":
    main()
