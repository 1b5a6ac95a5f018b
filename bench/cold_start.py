"""CUDA cold start: the first mc_rmsnorm_fwd on a CUDA tensor and
mc_cuda_prepare, each in a fresh process with its own empty HOME and
XDG_CACHE_HOME (so neither metalcore's cache nor the driver's JIT cache holds
anything), then again in a second process sharing the first one's HOME.
Times are of the call alone (torch imported and the tensors made before),
synchronized. Run from the repository root on a GPU machine:
python3 bench/cold_start.py [out.md] [library ...]  (default build/libmetalcore.so)."""
import os
import subprocess
import sys
import tempfile

CHILD = r"""
import ctypes, sys, time
import torch
sys.path.insert(0, "tests/gpu")
from mc import LIB, check, stream
what = sys.argv[1]
x = torch.randn(4, 4096, device="cuda")
w, y, r = torch.randn(4096, device="cuda"), torch.empty_like(x), torch.empty(4, device="cuda")
torch.cuda.synchronize()
t = time.perf_counter()
if what == "prepare":
    check("cuda_prepare", 0)
else:
    check("rmsnorm_fwd", x, w, 1e-6, y, r, stream())
torch.cuda.synchronize()
print(f"{time.perf_counter() - t:.3f}")
"""


def run(lib, what, home):
    env = dict(os.environ, HOME=home, XDG_CACHE_HOME=os.path.join(home, ".cache"), METALCORE_LIBRARY=lib)
    for k in ("MC_CACHE_DIR", "CUDA_CACHE_PATH", "CUDA_CACHE_DISABLE"):
        env.pop(k, None)
    out = subprocess.run([sys.executable, "-c", CHILD, what], env=env, capture_output=True, text=True)
    if out.returncode:
        sys.exit(out.stderr)
    return float(out.stdout.split()[-1])


def files_under(home):
    return sum(len(f) for _, _, f in os.walk(home))


def main():
    out_path = sys.argv[1] if len(sys.argv) > 1 else None
    libs = sys.argv[2:] or ["build/libmetalcore.so"]
    lines = ["| library | what | nothing cached s | second process, same HOME s | files left in HOME |",
             "|---|---|---:|---:|---:|"]
    for lib in libs:
        for what, label in (("rmsnorm", "first mc_rmsnorm_fwd"), ("prepare", "mc_cuda_prepare(0)")):
            with tempfile.TemporaryDirectory() as home:
                cold = run(lib, what, home)
                n = files_under(home)
                left = sorted(os.path.relpath(os.path.join(d, f), home) for d, _, fs in os.walk(home) for f in fs)
                print(f"{os.path.basename(lib)} {what}: left in HOME {left[:4]}{' ...' if len(left) > 4 else ''}")
                warm = run(lib, what, home)
            lines.append(f"| {os.path.basename(lib)} | {label} | {cold:.2f} | {warm:.2f} | {n} |")
            print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    print(text)
    if out_path:
        open(out_path, "w").write(text)


main()
