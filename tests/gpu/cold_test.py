"""The CUDA backend's first calls, each in a fresh process with its own cache
directory (MC_CACHE_DIR) and MC_DEBUG on, which makes the library name every
kernel image it loads: a first call compiles its one kernel, not its family;
a second process reads it from the cache; a call that would have to compile
while its stream is being captured fails with a message; mc_cuda_prepare
loads every kernel, after which capture works; a cache that cannot be
created, or is off, still computes. Run from the repository root:
python3 tests/gpu/cold_test.py"""
import os
import subprocess
import sys
import tempfile

CHILD = r"""
import sys
import torch
sys.path.insert(0, "tests/gpu")
from mc import LIB, call, check, stream
import torch.nn.functional as F
x = torch.randn(64, 4096, device="cuda")
w, y, r = torch.randn(4096, device="cuda"), torch.empty_like(x), torch.empty(64, device="cuda")
for step in sys.argv[1:]:
    if step == "rmsnorm":
        check("rmsnorm_fwd", x, w, 1e-6, y, r, stream())
        torch.cuda.synchronize()
        assert torch.allclose(y, F.rms_norm(x, (4096,), w, 1e-6), atol=1e-5)
    elif step == "capture_fails":
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            st = call("silu_fwd", x, y, stream())
        msg = LIB.mc_last_error().decode()
        assert st == 5 and "being captured" in msg and "mc_cuda_prepare" in msg, (st, msg)
        print("capture refused:", msg)
    elif step == "prepare":
        check("cuda_prepare", 0)
    elif step == "capture_works":
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            check("silu_fwd", x, y, stream())
        x.copy_(torch.randn_like(x))
        g.replay()
        torch.cuda.synchronize()
        assert torch.allclose(y, F.silu(x), atol=1e-6)
print("child ok")
"""

failures = []


def expect(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def child(cache, *steps):
    """(loaded image lines, stdout) of a fresh process running steps."""
    env = dict(os.environ, MC_CACHE_DIR=cache, MC_DEBUG="1")
    out = subprocess.run([sys.executable, "-c", CHILD, *steps], env=env, capture_output=True, text=True)
    if out.returncode:
        print(out.stdout, out.stderr)
        failures.append(f"child {steps} failed")
        return [], ""
    return [ln for ln in out.stderr.splitlines() if ln.startswith("metalcore: CUDA device 0:")], out.stdout


def entries(cache):
    return sorted(f for f in os.listdir(cache) if f.endswith(".bin")) if os.path.isdir(cache) else []


with tempfile.TemporaryDirectory() as tmp:
    cache = os.path.join(tmp, "cache")
    lines, _ = child(cache, "rmsnorm")
    expect(len(lines) == 1 and "rmsnorm_fwd_f32: cubin sm_" in lines[0] and "compiled" in lines[0],
           f"a first rmsnorm call compiles only its kernel, as a cubin: {lines}")
    expect(len(entries(cache)) == 1, f"one cache entry after it: {entries(cache)}")
    lines, _ = child(cache, "rmsnorm")
    expect(len(lines) == 1 and "cache in" in lines[0], f"a second process reads it from the cache: {lines}")
    lines, out = child(cache, "capture_fails", "prepare", "capture_works")
    expect("capture refused" in out, "a call that would compile while capturing fails with a message")
    kernels = [ln.split(":")[2].strip() for ln in lines]
    expect(len(kernels) == len(set(kernels)) and len(kernels) >= 80,
           f"mc_cuda_prepare loads every kernel once: {len(kernels)} images")
    expect(all("cubin sm_" in ln for ln in lines), "every image is a cubin")
    expect(len(entries(cache)) == len(kernels), f"one cache entry a kernel: {len(entries(cache))} for {len(kernels)}")
    expect(sum("cache in" in ln for ln in lines) == 1, "prepare took the one kernel already cached from the cache")
    first = entries(cache)[0]
    with open(os.path.join(cache, first), "r+b") as f:
        f.seek(-1, 2)
        b = f.read(1)
        f.seek(-1, 2)
        f.write(bytes([b[0] ^ 0xFF]))
    lines, _ = child(cache, "prepare")
    expect(sum("compiled in" in ln for ln in lines) == 1, "a corrupt entry is compiled again, the rest read")
    blocker = os.path.join(tmp, "file")
    open(blocker, "w").close()
    lines, out = child(os.path.join(blocker, "cache"), "rmsnorm")
    expect("child ok" in out and len(lines) == 1, "a cache directory that cannot be made: computed, no error")
    lines, out = child("off", "rmsnorm")
    expect("child ok" in out and not os.path.exists(os.path.join(os.getcwd(), "off")), "MC_CACHE_DIR=off: computed, nothing written")

print(f"{len(failures)} failed")
sys.exit(1 if failures else 0)
