"""QR on the CPU: metalcore.linalg.qr against torch.linalg.qr (this machine's
PyTorch, LAPACK underneath) on the same inputs in the same run, reduced and
complete modes (Q and R). GFLOP/s counts LAPACK's operations: 2mn^2 - 2n^3/3
for R, and 4mqk - 2(m+q)k^2 + 4k^3/3 for forming Q's q columns from k = min(m, n)
reflectors (as much again as R's in reduced mode). The same run measures
this machine's SGEMM rate through PyTorch (2048 x 2048, LAPACK's BLAS).
Each side is timed twice: allocating its outputs (the Python calls), and
writing into outputs allocated once (mc_qr through ctypes against
torch.linalg.qr(out=)), which leaves out the page faults of fresh memory.
Run from the repository root: python3 bench/qr_bench.py [out.md]"""
import ctypes
import sys
import time

import torch

sys.path.insert(0, "overrides/python")
import metalcore  # noqa: E402
from metalcore import _kernels, _lib  # noqa: E402
from report import Report  # noqa: E402  (the scripts' shared table)

# (batch, m, n, mode)
SHAPES = [(270000, 3, 3, "reduced"), (5000, 16, 16, "reduced"), (2000, 32, 32, "reduced"),
          (200, 128, 128, "reduced"), (1, 1024, 1024, "reduced"), (1, 2048, 512, "reduced"),
          (1, 4096, 1024, "reduced"), (1, 8192, 256, "reduced"),
          (200, 128, 64, "complete"), (1, 2048, 512, "complete")]

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
            threads = ""
            if part == "openblas":
                threads = f", {ctypes.CDLL(named[0]).openblas_get_num_threads()} threads"
            return f"{name} ({named[0].rsplit('/', 1)[-1]}{threads})"
    blas = [p for p in libs if "lapack" in p or "blas" in p]
    sys.exit("qr_bench: torch is not using an optimized LAPACK (loaded: " + (", ".join(blas) or "none") +
             "); install one, e.g. apt-get install libopenblas0-pthread, and run again")


def best_ms(fn, reps=7):
    # OpenBLAS's threads spin for a while after each call: a pause lets them
    # sleep, so that neither side is timed against the other's idle spinning
    time.sleep(0.5)
    fn()
    fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return sorted(ts)[len(ts) // 2] * 1e3


def flops(b, m, n, mode):
    k = min(m, n)
    q = m if mode == "complete" else k
    return b * ((2 * m * n * n - 2 * n ** 3 / 3) + (4 * m * q * k - 2 * (m + q) * k * k + 4 * k ** 3 / 3))


def sgemm_gflops():
    x, y = torch.randn(2048, 2048), torch.randn(2048, 2048)
    return 2 * 2048 ** 3 / best_ms(lambda: torch.mm(x, y)) / 1e6


def main():
    emit = Report()

    emit("# QR benchmark (CPU)")
    emit("")
    emit(f"PyTorch {torch.__version__} with {lapack()}, metalcore {metalcore.__version__}, float32, median of 7 runs after "
         f"two warm-ups. SGEMM through PyTorch in the same run: {sgemm_gflops():.0f} GFLOP/s.")
    emit("")
    emit("| batch × m × n | mode | metalcore ms | GFLOP/s | torch ms | GFLOP/s | speed-up | "
         "metalcore ms, outputs given | torch ms, out= | speed-up |")
    emit("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for b, m, n, mode in SHAPES:
        a = torch.randn(b, m, n)
        k = min(m, n)
        q = torch.empty(b, m, m if mode == "complete" else k)
        r = torch.empty(b, m if mode == "complete" else k, n)
        fl = flops(b, m, n, mode)
        t_mc = best_ms(lambda: metalcore.linalg.qr(a, mode))
        t_th = best_ms(lambda: torch.linalg.qr(a, mode))
        code = _kernels.QR_MODES[mode]
        ws = _kernels._workspace(_lib.lib.mc_qr_workspace_size, a, code)
        d = [_lib.describe(t, i) for i, t in enumerate((a, q if mode != "r" else None, r, ws))]
        t_mc_out = best_ms(lambda: _lib.run(_lib.lib.mc_qr, a, d[0], code, d[1], d[2], d[3]))
        t_th_out = best_ms(lambda: torch.linalg.qr(a, mode, out=(q, r)))
        emit(f"| {b}×{m}×{n} | {mode} | {t_mc:.1f} | {fl / t_mc / 1e6:.1f} | {t_th:.1f} | {fl / t_th / 1e6:.1f} | "
             f"{t_th / t_mc:.2f}× | {t_mc_out:.1f} | {t_th_out:.1f} | {t_th_out / t_mc_out:.2f}× |")
    emit.save(sys.argv[1] if len(sys.argv) > 1 else None)


main()
