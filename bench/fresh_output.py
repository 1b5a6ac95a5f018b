"""What a call whose result is large fresh memory pays before its own work,
on the CPU (bench/fresh_output.md): the batched Cholesky of issue 32's bar
(10000 x 32², a 41 MB result) against PyTorch writing a fresh tensor of the
same size (as it comes, and with the huge-page advice the library gives a
large fresh output), copying the input into a fresh tensor and into a warm
one, and PyTorch's Cholesky at its faster thread count.

    python3 bench/fresh_output.py > bench/fresh_output.md

Every round measures each call in turn, in the table's order (the median
of 7 calls after an untimed one, harness.timed; 3 for PyTorch's
Cholesky), so that a slow spell of the host
falls on all of them alike; the table gives every round, since the host's
spells are the point."""
import ctypes

import torch

import harness
import metalcore

ROUNDS, BATCH, N = 8, 10000, 32
HUGE_PAGE, MADV_HUGEPAGE = 2 << 20, 14
_madvise = ctypes.CDLL(None, use_errno=True).madvise
_madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)


def advised(t):
    """t with its whole 2 MiB pages advised huge before anything touches
    them, as the library advises a large output (backend/cpu/hugepages_linux.go)."""
    lo, hi = t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()
    start, end = (lo + HUGE_PAGE - 1) & -HUGE_PAGE, hi & -HUGE_PAGE
    if end > start:
        _madvise(start, end - start, MADV_HUGEPAGE)
    return t


def torch_cholesky_ms(a):
    """PyTorch's call at its faster setting, 1 thread or metalcore's count."""
    best = []
    for threads in (1, metalcore.cpu_threads()):
        torch.set_num_threads(threads)
        best.append(harness.timed(lambda: torch.linalg.cholesky_ex(a), "cpu", 3))
    torch.set_num_threads(metalcore.cpu_threads())
    return min(best)


def main():
    where = harness.on("cpu")
    gen = torch.Generator().manual_seed(N)
    b = torch.randn(BATCH, N, N, generator=gen, dtype=torch.float64)
    a = (b @ b.mT / N + torch.eye(N, dtype=torch.float64)).float()
    del b
    warm = torch.empty_like(a)
    # in each round's order: what a fresh block costs depends on what the
    # call before it freed (PyTorch's Cholesky frees small pages, metalcore's
    # call whole huge ones), and a same-run comparison runs one after the other
    calls = [
        lambda: torch_cholesky_ms(a),
        lambda: harness.timed(lambda: advised(torch.empty_like(a)).fill_(1.0), "cpu", 7),
        lambda: harness.timed(lambda: metalcore.linalg.cholesky_ex(a), "cpu", 7),
        lambda: harness.timed(lambda: torch.empty_like(a).fill_(1.0), "cpu", 7),
        lambda: harness.timed(lambda: a.clone(), "cpu", 7),
        lambda: harness.timed(lambda: warm.copy_(a), "cpu", 7),
    ]
    theirs, huge, ours, fill, clone, copy = harness.interleaved(calls, ROUNDS, lambda measure: measure())
    print("# A large fresh result on the CPU: the Cholesky call against the writes of its memory\n")
    print(f"metalcore {metalcore.__version__}, PyTorch {torch.__version__}, {where}; "
          "`python3 bench/fresh_output.py`. Milliseconds, each the median of 7 calls after an untimed one "
          "(PyTorch's Cholesky: 3, "
          "at 1 thread and at metalcore's count, the faster taken), every round taking the calls in the "
          "columns' order. "
          f"The input: {BATCH} x {N}² float32, positive definite; every call's result is a fresh "
          f"{4 * BATCH * N * N / 1e6:.0f} MB tensor but the warm copy's. Bar (issue 32): metalcore's "
          "cholesky_ex >= 3x PyTorch's, i.e. at most the last column.\n")
    print("| round | PyTorch cholesky_ex | then: a fresh tensor advised huge pages and filled | then: metalcore "
          "cholesky_ex | then: a fresh tensor filled | then: the input cloned | then: the input copied into a warm "
          "tensor | speed | PyTorch's / 3 |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r, row in enumerate(zip(theirs, huge, ours, fill, clone, copy), 1):
        print("| " + " | ".join([str(r)] + [f"{ms:.2f}" for ms in row]) +
              f" | {row[0] / row[2]:.2f}x | {row[0] / 3:.2f} |")


if __name__ == "__main__":
    main()
