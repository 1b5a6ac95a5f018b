"""metalcore.cross_entropy against F.cross_entropy through the public
functions, forward + backward (bench/losses.md):

    python3 bench/losses.py [cpu|cuda ...] > bench/losses.md

CPU: float32 logits [8192, 32000], both at metalcore's thread count (bar,
issue 31: >= 1.5x PyTorch). CUDA: [8192, 128256] as Hugging Face computes
a causal LM's loss, bfloat16 logits upcast to float32 (logits.float()),
and metalcore on the bfloat16 logits directly (computed in float32). Each
cell is the median of 5 timed rounds after a warm-up; peak memory is what
the call adds over its inputs."""
import statistics
import time

import torch
import torch.nn.functional as F

import harness
import metalcore


def timed(fn, device, rounds=5):
    fn()
    times = []
    for _ in range(rounds):
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def peak_mib(fn, device):
    if device != "cuda":
        return float("nan")
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / 2 ** 20


def step(loss_fn, logits, target, upcast):
    def run():
        x = logits.detach().requires_grad_()
        loss_fn(x.float() if upcast else x, target).backward()
    return run


def main():
    print("# Cross-entropy through the public functions, forward + backward\n")
    print(f"metalcore {metalcore.__version__}, PyTorch {torch.__version__}; `python3 bench/losses.py`. "
          "Milliseconds, median of 5 rounds; speed is PyTorch's time over metalcore's; memory: peak MiB "
          "the step adds over its inputs (CUDA).\n")
    for device in harness.devices():
        print(f"## {device} ({harness.on(device)})\n")
        print("| logits | PyTorch ms | metalcore ms | speed | PyTorch MiB | metalcore MiB |")
        print("|---|---:|---:|---:|---:|---:|")
        gen = torch.Generator().manual_seed(0)
        if device == "cpu":
            cases = [("float32 [8192, 32000]", torch.randn(8192, 32000, generator=gen), False, False)]
        else:
            x = torch.randn(8192, 128256, generator=gen).to("cuda", torch.bfloat16)
            cases = [("bfloat16 [8192, 128256], .float() first", x, True, True),
                     ("bfloat16 [8192, 128256], metalcore on bfloat16", x, True, False)]
        for name, logits, theirs_upcast, ours_upcast in cases:
            target = torch.randint(0, logits.shape[1], (logits.shape[0],), generator=gen).to(logits.device)
            theirs = step(F.cross_entropy, logits, target, theirs_upcast)
            ours = step(metalcore.cross_entropy, logits, target, ours_upcast)
            t_theirs, t_ours = timed(theirs, device), timed(ours, device)
            print(f"| {name} | {t_theirs:.2f} | {t_ours:.2f} | {t_theirs / t_ours:.2f} | "
                  f"{peak_mib(theirs, device):.0f} | {peak_mib(ours, device):.0f} |")
        print()


if __name__ == "__main__":
    main()
