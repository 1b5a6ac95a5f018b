"""QR on the CPU: metalcore.linalg.qr against torch.linalg.qr (this machine's
PyTorch, LAPACK underneath) on the same inputs in the same run, reduced mode
(Q and R). GFLOP/s counts 2mn^2 - 2n^3/3 for R plus as much for forming Q.
Each side is timed twice: allocating its outputs (the Python calls), and
writing into outputs allocated once (mc_qr through ctypes against
torch.linalg.qr(out=)), which leaves out the page faults of fresh memory.
Run from the repository root: python3 bench/qr_bench.py [out.md]"""
import sys
import time

import torch

sys.path.insert(0, "overrides/python")
import metalcore  # noqa: E402
from metalcore import _lib  # noqa: E402
from report import Report  # noqa: E402  (the scripts' shared table)

SHAPES = [(2000, 32, 32), (200, 128, 128), (1, 1024, 1024), (1, 2048, 512)]

# Optimized LAPACKs, by a part of their library's path. Debian's torch uses
# whichever libblas/liblapack the system's alternatives point at: the
# reference LAPACK makes every ratio look several times better than it is.
OPTIMIZED = {"openblas": "OpenBLAS", "libmkl": "MKL", "blis": "BLIS", "atlas": "ATLAS"}


def lapack():
    """The LAPACK torch.linalg.qr runs on, read from this process's loaded
    libraries; exits when it is the reference one."""
    torch.linalg.qr(torch.randn(8, 8))  # loads it
    libs = sorted({line.split()[-1] for line in open("/proc/self/maps") if ".so" in line.split()[-1]})
    for part, name in OPTIMIZED.items():
        found = [p for p in libs if part in p]
        if found:
            named = [p for p in found if part in p.rsplit("/", 1)[-1]] or found
            return f"{name} ({named[0].rsplit('/', 1)[-1]})"
    blas = [p for p in libs if "lapack" in p or "blas" in p]
    sys.exit("qr_bench: torch is not using an optimized LAPACK (loaded: " + (", ".join(blas) or "none") +
             "); install one, e.g. apt-get install libopenblas0-pthread, and run again")


def best_ms(fn, reps=7):
    fn()
    fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return sorted(ts)[len(ts) // 2] * 1e3


def main():
    emit = Report()

    emit("# QR benchmark (CPU)")
    emit("")
    emit(f"PyTorch {torch.__version__} ({torch.get_num_threads()} threads) with {lapack()}, "
         f"metalcore {metalcore.__version__}, float32, reduced mode (Q and R), median of 7 runs after two warm-ups.")
    emit("")
    emit("| batch × m × n | metalcore ms | GFLOP/s | torch ms | GFLOP/s | speed-up | "
         "metalcore ms, outputs given | torch ms, out= | speed-up |")
    emit("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for b, m, n in SHAPES:
        a = torch.randn(b, m, n)
        q, r = torch.empty(b, m, n), torch.empty(b, n, n)
        flops = b * 2 * (2 * m * n * n - 2 * n ** 3 / 3)
        t_mc = best_ms(lambda: metalcore.linalg.qr(a))
        t_th = best_ms(lambda: torch.linalg.qr(a))
        t_mc_out = best_ms(lambda: _lib.call("qr", a, 0, q, r, None, None))
        t_th_out = best_ms(lambda: torch.linalg.qr(a, out=(q, r)))
        emit(f"| {b}×{m}×{n} | {t_mc:.1f} | {flops / t_mc / 1e6:.1f} | {t_th:.1f} | {flops / t_th / 1e6:.1f} | "
             f"{t_th / t_mc:.2f}× | {t_mc_out:.1f} | {t_th_out:.1f} | {t_th_out / t_mc_out:.2f}× |")
    emit.save(sys.argv[1] if len(sys.argv) > 1 else None)


main()
