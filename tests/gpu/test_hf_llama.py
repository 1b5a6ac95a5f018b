"""patch_model on a real transformers LlamaForCausalLM (tiny, random
weights, eager attention, nothing downloaded), on CPU and CUDA: every
RMSNorm, gated MLP and attention softmax call reaches metalcore and the logits
match the unpatched model's. Needs transformers (the GPU machine has it):
  PYTHONPATH=overrides/python python3 -m pytest -q tests/gpu/test_hf_llama.py"""
import pytest
import torch

import metalcore

transformers = pytest.importorskip("transformers")


def tiny_llama(device, vocab):
    """A seeded 2-layer LlamaForCausalLM (eager attention) on device and a
    batch of 2 x 16 token ids; skips where metalcore has no such backend."""
    if device not in metalcore.backends():
        pytest.skip(f"no metalcore {device} backend here")
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=64)
    cfg._attn_implementation = "eager"
    return transformers.LlamaForCausalLM(cfg).to(device), torch.randint(0, vocab, (2, 16), device=device)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_llama_patched(device, monkeypatch):
    monkeypatch.setattr(metalcore._overrides, "SMALL_CUDA_BYTES", 0)  # its scores are small
    model, ids = tiny_llama(device, 128)
    model.eval()
    cfg = model.config
    with torch.no_grad():
        want = model(ids).logits
    report = metalcore.patch_model(model)
    kinds = sorted({cls for _, cls in report["swapped"]})
    assert kinds == ["LlamaForCausalLM", "LlamaMLP", "LlamaRMSNorm", "transformers.models.llama.modeling_llama"], report
    metalcore.reset_call_counts()
    with metalcore.pytorch_overrides(ops=["softmax"]), torch.no_grad():
        got = model(ids).logits
    calls = metalcore.call_counts()
    layers = cfg.num_hidden_layers
    assert calls.get("rmsnorm_fwd") == 2 * layers + 1, calls
    assert calls.get("glu_fwd") == layers and calls.get("softmax_fwd") == layers, calls
    assert calls.get("rope") == 2 * layers, calls
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert metalcore.unpatch_model(model) == len(report["swapped"])


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_llama_loss_without_logits(device):
    """The patched LlamaForCausalLM in training computes transformers' loss
    (shifted labels, -100 ignored; mean, or sum over num_items_in_batch)
    through metalcore.linear_cross_entropy without logits: the same loss and
    gradients as the unpatched model."""
    model, ids = tiny_llama(device, 1000)
    model.train()
    labels = ids.clone()
    labels[:, :3] = -100
    for kw in ({}, {"num_items_in_batch": torch.tensor(25, device=device)}):
        model.zero_grad()
        want = model(ids, labels=labels, **kw).loss
        want.backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters()}
        report = metalcore.patch_model(model)
        assert ("forward (loss)", "LlamaForCausalLM") in report["swapped"], report
        model.zero_grad()
        out = model(ids, labels=labels, **kw)
        assert out.logits is None
        out.loss.backward()
        torch.testing.assert_close(out.loss, want, rtol=1e-4, atol=1e-5)
        for n, p in model.named_parameters():
            torch.testing.assert_close(p.grad, grads[n], rtol=1e-3, atol=1e-5, msg=n)
        assert metalcore.unpatch_model(model) == len(report["swapped"])
