"""A large-vocabulary Llama training step on CUDA (issue 31's model):
PyTorch, metalcore.patch_model and, where liger_kernel imports,
Liger-Kernel's patch (bench/llm_step.md).

    python3 bench/llm_step.py > bench/llm_step.md

The model: vocabulary 128256, hidden 2048, 4 layers, 32 heads (8 for keys
and values), MLP 8192, bfloat16, SDPA attention, batch 4 x 2048 tokens,
labels given (the loss over the full vocabulary), PyTorch's fused AdamW for
every variant. Each variant runs in a process of its own (Liger patches
transformers' classes for the whole process), twice, alternating with the
others; a run builds the model from one seed, takes two untimed steps and
times five. Memory: the process's peak allocation over a step, weights,
gradients and optimizer state included."""
import json
import os
import statistics
import subprocess
import sys
import time

import torch

VARIANTS = ["PyTorch", "metalcore.patch_model", "Liger-Kernel"]
BATCH, SEQ = 4, 2048


def build():
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=4,
                      num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=4096)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    return LlamaForCausalLM(cfg).to(device="cuda", dtype=torch.bfloat16)


def measure(variant):
    """One run of variant: its step times (s), its peak bytes and first loss."""
    model = build()
    if variant == "metalcore.patch_model":
        import metalcore
        metalcore.patch_model(model)
    elif variant == "Liger-Kernel":
        from liger_kernel.transformers import apply_liger_kernel_to_llama
        apply_liger_kernel_to_llama(model=model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True)
    ids = torch.randint(0, model.config.vocab_size, (BATCH, SEQ), device="cuda",
                        generator=torch.Generator("cuda").manual_seed(1))
    times, losses = [], []
    for i in range(7):
        if i == 2:
            torch.cuda.reset_peak_memory_stats()
        torch.cuda.synchronize()
        t = time.perf_counter()
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
        losses.append(float(loss.detach()))
    return {"times": times[2:], "peak": torch.cuda.max_memory_allocated(), "loss": losses[0]}


def available(variant):
    if variant != "Liger-Kernel":
        return True
    try:
        import liger_kernel.transformers  # noqa: F401
    except ImportError:
        return False
    return True


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--variant":
        print(json.dumps(measure(sys.argv[2])))
        return
    import metalcore
    import transformers
    variants = [v for v in VARIANTS if available(v)]
    results = {v: {"times": [], "peak": 0} for v in variants}
    for _ in range(2):
        for v in variants:
            out = subprocess.run([sys.executable, __file__, "--variant", v], capture_output=True, text=True,
                                 env=os.environ, check=True).stdout
            r = json.loads(out.strip().splitlines()[-1])
            results[v]["times"] += r["times"]
            results[v]["peak"] = max(results[v]["peak"], r["peak"])
            results[v]["loss"] = r["loss"]
    print("# A large-vocabulary Llama training step\n")
    print(f"metalcore {metalcore.__version__}, PyTorch {torch.__version__}, transformers {transformers.__version__}, "
          f"{torch.cuda.get_device_name()}; `python3 bench/llm_step.py`. Vocabulary 128256, hidden 2048, 4 layers, "
          f"MLP 8192, 32/8 heads, bfloat16, SDPA, batch {BATCH} x {SEQ}, fused AdamW; the median of 10 timed steps "
          "over two processes per variant. Speed is PyTorch's step time over the variant's; memory is the peak "
          "allocation of a step (weights, gradients and optimizer state included). Bar (issue 31): patch_model "
          ">= 1.30x PyTorch's speed and <= 0.6x its peak memory, ahead of Liger-Kernel on both.\n")
    ref = statistics.median(results["PyTorch"]["times"])
    ref_peak = results["PyTorch"]["peak"]
    print("| variant | step ms | speed vs PyTorch | peak GiB | memory vs PyTorch | first loss |")
    print("|---|---:|---:|---:|---:|---:|")
    for v in variants:
        t = statistics.median(results[v]["times"])
        peak = results[v]["peak"]
        print(f"| {v} | {t * 1e3:.1f} | {ref / t:.3f} | {peak / 2 ** 30:.1f} | {peak / ref_peak:.3f} | "
              f"{results[v]['loss']:.4f} |")


if __name__ == "__main__":
    main()
