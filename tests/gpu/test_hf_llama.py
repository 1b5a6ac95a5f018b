"""patch_model on a real transformers LlamaForCausalLM (tiny, random
weights, eager attention, nothing downloaded), on CPU and CUDA: every
RMSNorm, gated MLP and attention softmax call reaches metalcore and the logits
match the unpatched model's. Needs transformers (the GPU machine has it):
  PYTHONPATH=overrides/python python3 -m pytest -q tests/gpu/test_hf_llama.py"""
import pytest
import torch

import metalcore

transformers = pytest.importorskip("transformers")


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_llama_patched(device):
    if device not in metalcore.backends():
        pytest.skip(f"no metalcore {device} backend here")
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=64)
    cfg._attn_implementation = "eager"
    model = transformers.LlamaForCausalLM(cfg).to(device).eval()
    ids = torch.randint(0, 128, (2, 16), device=device)
    with torch.no_grad():
        want = model(ids).logits
    report = metalcore.patch_model(model)
    kinds = sorted({cls for _, cls in report["swapped"]})
    assert kinds == ["LlamaMLP", "LlamaRMSNorm"], report
    metalcore.reset_call_counts()
    with metalcore.pytorch_overrides(ops=["softmax"]), torch.no_grad():
        got = model(ids).logits
    calls = metalcore.call_counts()
    layers = cfg.num_hidden_layers
    assert calls.get("rmsnorm_fwd") == 2 * layers + 1, calls
    assert calls.get("glu_fwd") == layers and calls.get("softmax_fwd") == layers, calls
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert metalcore.unpatch_model(model) == len(report["swapped"])
