"""Registers, spills and shared memory of every metalcore kernel, as ptxas
reports them: the program the library compiles (the prelude, the dialect helpers and every op
family's .cu), compiled by NVRTC with --ptxas-options=-v. A kernel over 128
registers cannot run 512-thread blocks; one over 64 fits one such block a
multiprocessor. Needs only NVRTC (no GPU). Run from the repository root:
python3 bench/registers.py [sm_XY] [name-filter]   (default sm_90)."""
import ctypes
import glob
import re
import sys


def nvrtc():
    for name in ("libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"):
        try:
            return ctypes.CDLL(name)
        except OSError:
            pass
    sys.exit("NVRTC not found")


def main():
    arch = sys.argv[1] if len(sys.argv) > 1 else "sm_90"
    want = sys.argv[2] if len(sys.argv) > 2 else ""
    src = "\n".join(open(p).read() for p in ["backend/cuda/prelude.cuh", "backend/dialect/dialect.h"] + sorted(glob.glob("ops/*/*.cu")))
    lib = nvrtc()
    prog = ctypes.c_void_p()
    if lib.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), b"metalcore.cu", 0, None, None):
        sys.exit("nvrtcCreateProgram failed")
    opts = [f"--gpu-architecture={arch}".encode(), b"--std=c++14", b"-default-device", b"--ptxas-options=-v"]
    res = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
    size = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetProgramLog(prog, log)
    text = log.value.decode()
    if res:
        sys.exit(text)
    print(f"| kernel ({arch}) | registers | spill stores | spill loads | static shared bytes |")
    print("|---|---:|---:|---:|---:|")
    for block in text.split("Compiling entry function '")[1:]:
        name = block[:block.index("'")]
        if want not in name:
            continue
        spill = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", block)
        regs = re.search(r"Used (\d+) registers", block)
        smem = re.search(r"(\d+) bytes smem", block)
        print(f"| {name} | {regs.group(1) if regs else '?'} | {spill.group(1) if spill else '?'} | "
              f"{spill.group(2) if spill else '?'} | {smem.group(1) if smem else 0} |")


main()
