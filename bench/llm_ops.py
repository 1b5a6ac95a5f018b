"""The LLM training ops through metalcore's public functions against
PyTorch's, forward + backward (bench/llm_ops.md):

    python3 bench/llm_ops.py [cpu|cuda ...] > bench/llm_ops.md

metalcore.cross_entropy against F.cross_entropy:
CPU: float32 logits [8192, 32000], both at metalcore's thread count (bar,
issue 31: >= 1.5x PyTorch). CUDA: [8192, 128256] as Hugging Face computes
a causal LM's loss, bfloat16 logits upcast to float32 (logits.float()),
and metalcore on the bfloat16 logits directly (computed in float32). Then
linear_cross_entropy against F.cross_entropy(F.linear(h, W).float(), t):
CPU float32 h [2048, 1024], W [32000, 1024] (bar: >= 1.0x, memory growth
< 30% of the logits); CUDA bfloat16 h [8192, 2048], W [128256, 2048]. Each
swiglu against F.silu(gate) * up at [8192, 5632] (float32 on the CPU,
bfloat16 on CUDA; bar on the H100: >= 1.2x). rope against Hugging Face's
apply_rotary_pos_emb on q and k [B, H, T, 128] made by transpose(1, 2) as
attention layers make them: CPU float32 [2, 8, 512], CUDA bfloat16
[4, 16, 2048] (bar on the H100: >= 1.2x). Each cell is the median of 5
timed rounds on the CPU (3 for its linear) and of 20 on CUDA (5 for its
linear), after a warm-up; peak memory is what the call adds over its
inputs (CUDA: memory allocated; CPU: resident memory, the gradients
included). Where Liger-Kernel's Triton ops can be imported
(liger_kernel on PYTHONPATH, CUDA), its cross-entropy, SiLU-mul and RoPE
run in the same process on the same inputs (bar: >= 1.0x Liger for
cross_entropy and rope)."""
import torch
import torch.nn.functional as F

import harness
import metalcore


def _status_mib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1]) / 1024
    raise OSError(f"no {field} in /proc/self/status")


def peak_mib(fn, device):
    """What fn adds at its peak, in MiB, as a table cell: on CUDA to the
    memory allocated, on the CPU to the process's resident memory (Linux:
    its high-water mark, reset first; elsewhere an empty cell)."""
    if device != "cuda":
        try:
            base = _status_mib("VmRSS:")
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")  # the high-water mark starts again from the resident memory now
        except OSError:
            return ""
        fn()
        return f"{_status_mib('VmHWM:') - base:.0f}"
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    return f"{(torch.cuda.max_memory_allocated() - base) / 2 ** 20:.0f}"


def liger():
    """Liger-Kernel's functions for the rows it has, or {} where it cannot
    be imported."""
    try:
        from liger_kernel.ops.cross_entropy import LigerCrossEntropyFunction
        from liger_kernel.ops.rope import LigerRopeFunction
        from liger_kernel.ops.swiglu import LigerSiLUMulFunction
    except ImportError:
        return {}
    return {"cross_entropy": lambda x, t: LigerCrossEntropyFunction.apply(x, t, None, -100, 0.0, 0.0, "mean", None,
                                                                            False, False, False)[0],
            "swiglu": LigerSiLUMulFunction.apply, "rope": LigerRopeFunction.apply}


def row(name, theirs, ours, peer, device, rounds=None):
    """A table row: PyTorch's step, metalcore's, and the peer's (or None)."""
    t_theirs, t_ours = harness.timed(theirs, device, rounds), harness.timed(ours, device, rounds)
    cells = [name, f"{t_theirs:.2f}", f"{t_ours:.2f}", f"{t_theirs / t_ours:.2f}", peak_mib(theirs, device),
             peak_mib(ours, device)]
    if peer is None:
        cells += ["", "", ""]
    else:
        t_peer = harness.timed(peer, device, rounds)
        cells += [f"{t_peer:.2f}", f"{t_peer / t_ours:.2f}", peak_mib(peer, device)]
    print("| " + " | ".join(cells) + " |")


def step(loss_fn, logits, target, upcast):
    def run():
        x = logits.detach().requires_grad_()
        loss_fn(x.float() if upcast else x, target).backward()
    return run


def linear_step(loss_fn, h, w, target):
    def run():
        hh, ww = h.detach().requires_grad_(), w.detach().requires_grad_()
        loss_fn(hh, ww, target).backward()
    return run


def torch_linear_ce(h, w, target):
    return F.cross_entropy(F.linear(h, w).float(), target)


def hf_rope(q, k, cos, sin):
    def half(x):
        x1, x2 = x.chunk(2, -1)
        return torch.cat((-x2, x1), -1)
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return q * cos + half(q) * sin, k * cos + half(k) * sin


def rope_step(fn, q, k, cos, sin, dq, dk):
    def run():
        qq, kk = q.detach().requires_grad_(), k.detach().requires_grad_()
        torch.autograd.backward(fn(qq, kk, cos, sin), (dq, dk))
    return run


def glu_step(fn, g, u, dy):
    def run():
        gg, uu = g.detach().requires_grad_(), u.detach().requires_grad_()
        fn(gg, uu).backward(dy)
    return run


def main():
    print("# The LLM ops through the public functions, forward + backward\n")
    print(f"metalcore {metalcore.__version__}, PyTorch {torch.__version__}; `python3 bench/llm_ops.py`. "
          "Milliseconds, median of 5 rounds (CPU) or 20 (CUDA); speed is PyTorch's time over metalcore's; memory: peak MiB "
          "the step adds over its inputs (CUDA: memory allocated; CPU: resident memory).\n")
    for device in harness.devices():
        peers = liger() if device == "cuda" else {}
        print(f"## {device} ({harness.on(device)})\n")
        print("| op | PyTorch ms | metalcore ms | speed | PyTorch MiB | metalcore MiB | Liger ms | speed vs Liger | "
              "Liger MiB |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        gen = torch.Generator().manual_seed(0)
        if device == "cpu":
            cases = [("cross_entropy, float32 [8192, 32000]", torch.randn(8192, 32000, generator=gen), False, False)]
        else:
            x = torch.randn(8192, 128256, generator=gen).to("cuda", torch.bfloat16)
            cases = [("cross_entropy, bfloat16 [8192, 128256], .float() first", x, True, True),
                     ("cross_entropy, bfloat16 [8192, 128256], metalcore on bfloat16", x, True, False)]
        for name, logits, theirs_upcast, ours_upcast in cases:
            target = torch.randint(0, logits.shape[1], (logits.shape[0],), generator=gen).to(logits.device)
            peer = peers.get("cross_entropy") if not ours_upcast else None  # Liger reads the 16-bit logits too
            row(name, step(F.cross_entropy, logits, target, theirs_upcast),
                step(metalcore.cross_entropy, logits, target, ours_upcast),
                peer and step(peer, logits, target, False), device)
        # on the CPU also 8192 rows, where the gradient of W (V x H) is no
        # longer most of what the step adds (one timed round: 45 s a step)
        shapes = [(2048, 1024, 32000, torch.float32, 3), (8192, 1024, 32000, torch.float32, 1)] if device == "cpu" \
            else [(8192, 2048, 128256, torch.bfloat16, 5)]
        for n, hidden, v, dtype, rounds in shapes:
            h = torch.randn(n, hidden, generator=gen).to(device, dtype)
            w = (torch.randn(v, hidden, generator=gen) / hidden ** 0.5).to(device, dtype)
            target = torch.randint(0, v, (n,), generator=gen).to(device)
            row(f"linear_cross_entropy, {str(dtype)[6:]} h [{n}, {hidden}], W [{v}, {hidden}] (logits "
                f"{4 * n * v / 2 ** 20:.0f} MiB as float32)", linear_step(torch_linear_ce, h, w, target),
                linear_step(metalcore.linear_cross_entropy, h, w, target), None, device, rounds)
        dtype = torch.float32 if device == "cpu" else torch.bfloat16
        g, u, dy = (torch.randn(8192, 5632, generator=gen).to(device, dtype) for _ in range(3))
        peer = peers.get("swiglu")
        row(f"swiglu, {str(dtype)[6:]} [8192, 5632]", glu_step(lambda a, b: F.silu(a) * b, g, u, dy),
            glu_step(metalcore.swiglu, g, u, dy), peer and glu_step(peer, g, u, dy), device)
        b, h, t = (2, 8, 512) if device == "cpu" else (4, 16, 2048)
        q, k = (torch.randn(b, t, h, 128, generator=gen).to(device, dtype).transpose(1, 2) for _ in range(2))
        emb = torch.randn(b, t, 128, generator=gen).to(device, dtype)
        cos, sin = emb.cos(), emb.sin()
        dq, dk = (torch.randn(b, h, t, 128, generator=gen).to(device, dtype) for _ in range(2))
        peer = peers.get("rope")
        row(f"rope, {str(dtype)[6:]} q and k [{b}, {h}, {t}, 128], transposed", rope_step(hf_rope, q, k, cos, sin, dq, dk),
            rope_step(metalcore.rope, q, k, cos, sin, dq, dk), peer and rope_step(peer, q, k, cos, sin, dq, dk), device)
        print()


if __name__ == "__main__":
    main()
