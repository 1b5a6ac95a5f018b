"""Where the CUDA cold start goes. (1) Each op family's source (the prelude,
the dialect helpers and the family's .cu) and the whole source as one program, compiled by NVRTC
for sm_XY (cubin) and compute_XY (PTX), each image loaded by the driver with
its JIT cache off. (2) Every kernel's own program, as the library compiles
it (written by `go run ./bench/programs` into build/programs), compiled for
sm_XY one at a time with ptxas's statistics, and all of them at once on a
thread per core, as mc_cuda_prepare does. Needs NVRTC and a GPU.
Run from the repository root: python3 bench/compile_times.py [out.md]."""
import ctypes
import glob
import os
import re
import sys
import time
from concurrent.futures import ThreadPoolExecutor

os.environ["CUDA_CACHE_DISABLE"] = "1"  # the driver must assemble PTX every time


def load(names):
    for name in names:
        try:
            return ctypes.CDLL(name)
        except OSError:
            pass
    sys.exit(f"none of {names} found")


nvrtc = load(["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"])
cuda = load(["libcuda.so.1"])


def compile_program(src, arch, verbose=False):
    """(seconds, image bytes or None, log)"""
    prog = ctypes.c_void_p()
    assert nvrtc.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), b"metalcore.cu", 0, None, None) == 0
    opts = [f"--gpu-architecture={arch}".encode(), b"--std=c++14", b"-default-device"]
    if verbose:
        opts.append(b"--ptxas-options=-v")
    t = time.perf_counter()
    res = nvrtc.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
    dt = time.perf_counter() - t
    n = ctypes.c_size_t()
    nvrtc.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
    log = ctypes.create_string_buffer(n.value)
    nvrtc.nvrtcGetProgramLog(prog, log)
    image = None
    if res == 0:
        get_size, get = ((nvrtc.nvrtcGetCUBINSize, nvrtc.nvrtcGetCUBIN) if arch.startswith("sm_")
                         else (nvrtc.nvrtcGetPTXSize, nvrtc.nvrtcGetPTX))
        get_size(prog, ctypes.byref(n))
        buf = ctypes.create_string_buffer(n.value)
        get(prog, buf)
        image = buf.raw
    nvrtc.nvrtcDestroyProgram(ctypes.byref(prog))
    return dt, image, log.value.decode(errors="replace")


def load_seconds(image):
    mod = ctypes.c_void_p()
    t = time.perf_counter()
    r = cuda.cuModuleLoadData(ctypes.byref(mod), ctypes.c_char_p(image))
    dt = time.perf_counter() - t
    if r:
        return None
    cuda.cuModuleUnload(mod)
    return dt


def main():
    assert cuda.cuInit(0) == 0
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    cuda.cuDeviceGet(ctypes.byref(dev), 0)
    cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev)
    cuda.cuCtxSetCurrent(ctx)
    major, minor = ctypes.c_int(), ctypes.c_int()
    cuda.cuDeviceGetAttribute(ctypes.byref(major), 75, dev)
    cuda.cuDeviceGetAttribute(ctypes.byref(minor), 76, dev)
    v = (ctypes.c_int(), ctypes.c_int())
    nvrtc.nvrtcVersion(ctypes.byref(v[0]), ctypes.byref(v[1]))
    cc = f"{major.value}{minor.value}"
    prelude = open("backend/cuda/prelude.cuh").read() + "\n" + open("backend/dialect/dialect.h").read()
    families = {p.split("/")[1]: open(p).read() for p in sorted(glob.glob("ops/*/*.cu"))}
    programs = {f: prelude + "\n" + s for f, s in families.items()}
    programs["all (one program)"] = prelude + "\n" + "\n".join(families.values())
    out = [f"NVRTC {v[0].value}.{v[1].value}, device sm_{cc}; the driver's JIT cache off.", "",
           "| program | sm_XY compile s | cubin load s | compute_XY compile s | PTX load (driver JIT) s |",
           "|---|---:|---:|---:|---:|"]
    for name, src in programs.items():
        ct, cubin, clog = compile_program(src, f"sm_{cc}")
        pt, ptx, plog = compile_program(src, f"compute_{cc}")
        cl = f"{load_seconds(cubin):.3f}" if cubin else "failed: " + clog.strip().replace("\n", " ")[:300]
        pl = f"{load_seconds(ptx):.3f}" if ptx else "failed: " + plog.strip().replace("\n", " ")[:300]
        out.append(f"| {name} | {ct:.2f} | {cl} | {pt:.2f} | {pl} |")
        print(out[-1], flush=True)
    kernels = sorted(glob.glob("build/programs/*.cu"))
    if kernels:
        rows = []
        for path in kernels:
            t, image, log = compile_program(open(path).read(), f"sm_{cc}", verbose=True)
            regs = re.search(r"Used (\d+) registers", log)
            spill = re.search(r"(\d+) bytes spill stores", log)
            rows.append((t, os.path.basename(path)[:-3], regs.group(1) if regs else "?", spill.group(1) if spill else "?",
                         "ok" if image else "FAILED"))
        rows.sort(reverse=True)
        total = sum(r[0] for r in rows)
        out += ["", f"Each kernel's own program, sm_{cc}, one at a time: {len(rows)} programs, {total:.1f} s in all.", "",
                "| kernel | compile s | registers | spill store bytes | |", "|---|---:|---:|---:|---|"]
        out += [f"| {k} | {t:.2f} | {r} | {sp} | {ok} |" for t, k, r, sp, ok in rows]
        threads = os.cpu_count()
        srcs = [open(p).read() for p in kernels]
        t = time.perf_counter()
        with ThreadPoolExecutor(threads) as pool:
            results = list(pool.map(lambda src: compile_program(src, f"sm_{cc}")[1] is not None, srcs))
        out += ["", f"All {len(srcs)} at once on {threads} threads: {time.perf_counter() - t:.2f} s wall, "
                f"{sum(results)} compiled."]
    text = "\n".join(out) + "\n"
    print(text)
    if len(sys.argv) > 1:
        open(sys.argv[1], "w").write(text)


main()
