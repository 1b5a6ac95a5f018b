"""What real models call: modules with PyTorch's signatures, patch_model on a
Llama-like block written from transformers' published definitions, softmax
as models call it, AdamW's PyTorch keywords, DistributedDataParallel."""
import os
import tempfile

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import metalcore

from conftest import ORIGINALS

pytestmark = pytest.mark.usefixtures("restore_overrides")


# ---- transformers' Llama modules (LlamaRMSNorm, LlamaMLP, eager attention's
# softmax), as published, without the rotary embedding and the cache ----------

class LlamaRMSNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class GemmaRMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        output = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        output = output * (1.0 + self.weight.float())
        return output.type_as(x)


class SiLUActivation(nn.Module):
    """ACT2FN["silu"] in transformers 5 (nn.SiLU in transformers 4)."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return nn.functional.silu(input)


class LlamaMLP(nn.Module):
    def __init__(self, hidden, intermediate, act):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)
        self.act_fn = act  # ACT2FN["silu"]

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class LlamaAttention(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = (nn.Linear(hidden, hidden, bias=False) for _ in range(4))

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = (p(x).view(b, s, self.heads, self.head_dim).transpose(1, 2) for p in (self.q_proj, self.k_proj,
                                                                                        self.v_proj))
        attn_weights = torch.matmul(q, k.transpose(2, 3)) * self.head_dim ** -0.5
        causal = torch.triu(torch.full((s, s), float("-inf")), 1)
        attn_weights = attn_weights + causal
        attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(q.dtype)
        out = torch.matmul(attn_weights, v).transpose(1, 2).reshape(b, s, -1)
        return self.o_proj(out)


class LlamaDecoderLayer(nn.Module):
    def __init__(self, act, hidden=64, heads=4, intermediate=128):
        super().__init__()
        self.self_attn = LlamaAttention(hidden, heads)
        self.mlp = LlamaMLP(hidden, intermediate, act)
        self.input_layernorm = LlamaRMSNorm(hidden)
        self.post_attention_layernorm = LlamaRMSNorm(hidden)

    def forward(self, x):
        x = x + self.self_attn(self.input_layernorm(x))
        return x + self.mlp(self.post_attention_layernorm(x))


def test_patch_model_on_a_llama_block():
    torch.manual_seed(0)
    model = nn.Sequential(LlamaDecoderLayer(SiLUActivation()), LlamaDecoderLayer(nn.SiLU()), GemmaRMSNorm(64))
    for p in model.parameters():
        p.data.normal_(0, 0.2)
    x = torch.randn(2, 10, 64, requires_grad=True)
    want = model(x)
    want.sum().backward()
    want_grad = x.grad.clone()
    x.grad = None
    keys = list(model.state_dict())

    report = metalcore.patch_model(model)
    swapped = {name for name, _ in report["swapped"]}
    assert swapped == {f"{i}.{m}" for i in (0, 1) for m in ("input_layernorm", "post_attention_layernorm", "mlp")}
    assert [(n, c) for n, c, _ in report["left"]] == [("2", "GemmaRMSNorm")]
    assert list(model.state_dict()) == keys
    metalcore.reset_call_counts()
    with metalcore.pytorch_overrides(ops=["softmax"]):  # the attention's functional softmax
        got = model(x)
        got.sum().backward()
    calls = metalcore.call_counts()
    assert calls["rmsnorm_fwd"] == 4 and calls["glu_fwd"] == 2 and calls["softmax_fwd"] == 2, calls
    assert calls["rmsnorm_bwd"] == 4 and calls["glu_bwd"] == 2 and calls["softmax_bwd"] == 2, calls
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(x.grad, want_grad, rtol=1e-4, atol=1e-4)

    assert metalcore.unpatch_model(model) == 6
    assert type(model[0].input_layernorm) is LlamaRMSNorm and type(model[1].mlp.act_fn) is nn.SiLU
    assert type(model[0].mlp.act_fn) is SiLUActivation


def test_patch_model_swaps_pytorch_modules():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 16), nn.LayerNorm(16), nn.GELU(approximate="tanh"), nn.SiLU(),
                          nn.Softmax(dim=-1))
    x = torch.randn(4, 16)
    want = model(x)
    weight = model[1].weight
    report = metalcore.patch_model(model)
    assert type(model[1]) is metalcore.nn.LayerNorm and model[1].weight is weight  # the same Parameter
    assert [c for _, c in report["swapped"]] == ["LayerNorm", "GELU", "SiLU", "Softmax"]
    metalcore.reset_call_counts()
    torch.testing.assert_close(model(x), want, rtol=1e-5, atol=1e-6)
    assert set(metalcore.call_counts()) == {"layernorm_fwd", "gelu_fwd", "silu_fwd", "softmax_fwd"}
    assert metalcore.unpatch_model(model) == 4
    assert [type(m) for m in model[1:]] == [nn.LayerNorm, nn.GELU, nn.SiLU, nn.Softmax]


# ---- modules -------------------------------------------------------------------

def test_module_signatures_and_state_dicts():
    torch.manual_seed(0)
    x = torch.randn(3, 5, 32)
    m = metalcore.nn.RMSNorm([32], eps=1e-5, elementwise_affine=True, device="cpu", dtype=torch.float32)
    assert list(m.state_dict()) == ["weight"] and m.weight.shape == (32,)
    if hasattr(nn, "RMSNorm"):
        ref = nn.RMSNorm([32], eps=1e-5)
        m.load_state_dict(ref.state_dict())
        torch.testing.assert_close(m(x), ref(x))
    assert metalcore.nn.RMSNorm(32, elementwise_affine=False).weight is None
    ln, ref = metalcore.nn.LayerNorm(32, eps=1e-5), nn.LayerNorm(32, eps=1e-5)
    ln.load_state_dict(ref.state_dict())
    torch.testing.assert_close(ln(x), ref(x), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(metalcore.nn.GELU(approximate="tanh")(x), F.gelu(x, approximate="tanh"))
    torch.testing.assert_close(metalcore.nn.SiLU()(x), F.silu(x))
    torch.testing.assert_close(metalcore.nn.Softmax(dim=-1)(x), F.softmax(x, -1))
    torch.testing.assert_close(metalcore.nn.Softmax(dim=1)(x), F.softmax(x, 1))  # another dim: PyTorch's
    r = torch.randn_like(x)
    f = metalcore.nn.FusedAddRMSNorm(32, eps=1e-6)
    y, total = f(x, r)
    torch.testing.assert_close(total, x + r)
    torch.testing.assert_close(y, metalcore.nn.RMSNorm(32, eps=1e-6)(x + r))
    # with a gradient wanted: PyTorch's sum, metalcore's norm, differentiable
    xg = x.clone().requires_grad_()
    y, total = f(xg, r)
    y.sum().backward()
    assert xg.grad is not None and f.weight.grad is not None


# ---- softmax as models call it --------------------------------------------------

def test_softmax_variants_reach_metalcore():
    x = torch.randn(4, 7)
    want = F.softmax(x.double(), -1).float()
    want_b = F.softmax(x.bfloat16().double(), -1).float()
    with metalcore.pytorch_overrides(ops=["softmax"]):
        metalcore.reset_call_counts()
        metalcore.reset_fallback_counts()
        for y in (torch.softmax(x, -1), x.softmax(-1), x.softmax(dim=-1, dtype=torch.float32),
                  F.softmax(x, -1, dtype=torch.float32), nn.Softmax(-1)(x)):
            torch.testing.assert_close(y, want)
        assert metalcore.call_counts() == {"softmax_fwd": 5}
        xb = x.bfloat16().requires_grad_()
        for y in (torch.softmax(xb, -1, dtype=torch.float32), F.softmax(xb, -1, dtype=torch.float32)):
            assert y.dtype == torch.float32  # the upcast, computed in float32 from the bfloat16 values
            torch.testing.assert_close(y, want_b, rtol=1e-5, atol=1e-6)
        assert metalcore.call_counts() == {"softmax_fwd": 7}
        y.square().sum().backward()
        want = torch.autograd.grad(ORIGINALS["softmax"](xb.float(), -1).square().sum(), xb)[0]
        assert xb.grad.dtype == torch.bfloat16
        torch.testing.assert_close(xb.grad.float(), want.float(), rtol=2e-2, atol=1e-3)
        torch.softmax(x.bfloat16(), -1, dtype=torch.float64)  # another upcast: PyTorch's, counted
        x.softmax(0)
    assert metalcore.fallback_counts()["softmax"] == {"dtype=float64 on bfloat16 input": 1,
                                                      "dim other than the last": 1}
    assert torch.softmax(x, -1) is not None and torch.Tensor.softmax is not None


# ---- AdamW ---------------------------------------------------------------------

def test_adamw_keywords():
    p = [torch.randn(4, requires_grad=True)]
    for kw in (dict(foreach=True), dict(fused=True), dict(foreach=False, fused=False), dict(capturable=False)):
        metalcore.optim.AdamW(p, lr=1e-3, **kw)
    with pytest.raises(ValueError, match="differentiable"):
        metalcore.optim.AdamW(p, differentiable=True)
    metalcore.optim.AdamW(p, capturable=True)
    metalcore.optim.AdamW(p, lr=torch.tensor(1e-3), capturable=True)
    with pytest.raises(ValueError, match="capturable"):
        metalcore.optim.AdamW(p, lr=torch.tensor(1e-3))


class Wrapped(torch.Tensor):
    """A tensor subclass standing in for DTensor."""


def test_adamw_falls_back_for_tensor_subclasses():
    torch.manual_seed(0)
    plain = torch.randn(6, requires_grad=True)
    sub = torch.randn(6).as_subclass(Wrapped).requires_grad_()
    ref = [plain.detach().clone().requires_grad_(), sub.detach().clone().requires_grad_()]
    metalcore.reset_fallback_counts()
    ours, theirs = metalcore.optim.AdamW([plain, sub], lr=1e-2), torch.optim.AdamW(ref, lr=1e-2)
    for _ in range(3):
        g = torch.randn(6)
        for a, b in zip([plain, sub], ref):
            a.grad, b.grad = g.clone(), g.clone()
        ours.step()
        theirs.step()
    torch.testing.assert_close(plain.detach(), ref[0].detach(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(sub.detach().as_subclass(torch.Tensor), ref[1].detach().as_subclass(torch.Tensor),
                               rtol=1e-5, atol=1e-6)
    assert metalcore.fallback_counts()["adamw"] == {"tensor subclass": 3}


# ---- DistributedDataParallel (gloo, 2 processes) ----------------------------------

def _ddp_worker(rank, world, store, out):
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), metalcore.nn.RMSNorm(32), metalcore.nn.SiLU(), nn.Linear(32, 1))
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = metalcore.optim.AdamW(ddp.parameters(), lr=1e-2)
    torch.manual_seed(1 + rank)  # each rank its own data
    for _ in range(5):
        x = torch.randn(8, 16)
        loss = ddp(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    torch.save([p.detach() for p in model.parameters()], f"{out}.{rank}")
    dist.destroy_process_group()


def test_ddp_gloo_two_processes():
    with tempfile.TemporaryDirectory() as d:
        store, out = os.path.join(d, "store"), os.path.join(d, "params")
        torch.multiprocessing.spawn(_ddp_worker, args=(2, store, out), nprocs=2, join=True)
        a, b = torch.load(f"{out}.0"), torch.load(f"{out}.1")
    for x, y in zip(a, b):
        torch.testing.assert_close(x, y)  # the ranks stepped the same averaged gradients


def scaled_step(opt, grad_scale, found_inf):
    """What PyTorch 2's GradScaler.step does around an optimizer that
    declares _step_supports_amp_scaling."""
    opt.grad_scale, opt.found_inf = grad_scale, found_inf
    try:
        opt.step()
    finally:
        del opt.grad_scale, opt.found_inf


def test_adamw_with_grad_scaling():
    """GradScaler's protocol (PyTorch 2: grad_scale and found_inf set on the
    optimizer around step()) unscales inside the step, and skips it (nothing
    changes, step counts included) when found_inf is set; a tensor subclass
    on PyTorch's arithmetic too."""
    assert metalcore.optim.AdamW._step_supports_amp_scaling
    torch.manual_seed(0)
    ours = [torch.randn(5, requires_grad=True), torch.randn(3).as_subclass(Wrapped).requires_grad_()]
    ref = [t.detach().clone().as_subclass(torch.Tensor).requires_grad_() for t in ours]
    opt, ref_opt = metalcore.optim.AdamW(ours, lr=1e-2), torch.optim.AdamW(ref, lr=1e-2)
    scale = torch.tensor([512.0])
    for step in range(4):
        grads = [torch.randn_like(r) for r in ref]
        for o, r, g in zip(ours, ref, grads):
            o.grad, r.grad = g * 512, g.clone()
        if step == 2:  # an overflow: skipped
            before = [o.detach().clone() for o in ours]
            scaled_step(opt, scale, torch.tensor([1.0]))
            assert all(torch.equal(a, b) for a, b in zip(before, ours))
            assert int(opt.state[ours[0]]["step"]) == 2
            continue
        scaled_step(opt, scale, torch.tensor([0.0]))
        ref_opt.step()
    for o, r in zip(ours, ref):
        torch.testing.assert_close(o.detach().as_subclass(torch.Tensor), r.detach(), rtol=1e-5, atol=1e-6)


class TwoStepMLP(LlamaMLP):
    """transformers' LlamaMLP in its two-statement form (Mistral's too)."""

    def forward(self, x):
        down_proj = self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))
        return down_proj


def test_patch_model_swaps_a_silu_gated_mlp():
    torch.manual_seed(0)
    model = torch.nn.Sequential(TwoStepMLP(16, 40, torch.nn.SiLU()), TwoStepMLP(16, 40, torch.nn.GELU()))
    x = torch.randn(3, 5, 16)
    want, keys = model(x), list(model.state_dict())
    report = metalcore.patch_model(model)
    assert report["swapped"] == [("0", "TwoStepMLP"), ("1.act_fn", "GELU")], report
    assert report["left"] == [("1", "TwoStepMLP", "act_fn is not SiLU")], report
    assert isinstance(model[0], metalcore.nn.SwiGLUMLP) and list(model.state_dict()) == keys
    metalcore.reset_call_counts()
    got = model(x)
    assert metalcore.call_counts().get("glu_fwd") == 1
    torch.testing.assert_close(got, want)
    got.sum().backward()
    assert model[0].gate_proj.weight.grad is not None
    assert metalcore.unpatch_model(model) == 2 and type(model[0]) is TwoStepMLP and type(model[1].act_fn) is nn.GELU


# ---- a causal language model of transformers' form (a base model's hidden
# states, an lm_head Linear, ForCausalLMLoss's shifted, -100-ignoring loss) --

class TinyBase(nn.Module):
    def __init__(self, vocab, hidden):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.proj = nn.Linear(hidden, hidden)

    def forward(self, input_ids, attention_mask=None, **kwargs):
        from types import SimpleNamespace
        return SimpleNamespace(last_hidden_state=torch.tanh(self.proj(self.embed(input_ids))))


class TinyForCausalLM(nn.Module):
    def __init__(self, vocab=97, hidden=32):
        super().__init__()
        from types import SimpleNamespace
        self.config = SimpleNamespace(vocab_size=vocab)
        self.model = TinyBase(vocab, hidden)
        self.lm_head = nn.Linear(hidden, vocab, bias=False)

    def forward(self, input_ids=None, attention_mask=None, labels=None, num_items_in_batch=None, **kwargs):
        from types import SimpleNamespace
        logits = self.lm_head(self.model(input_ids, attention_mask).last_hidden_state)
        loss = None
        if labels is not None:  # transformers' ForCausalLMLoss
            shift = F.pad(labels, (0, 1), value=-100)[..., 1:]
            loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), shift.reshape(-1), ignore_index=-100,
                                   reduction="sum" if num_items_in_batch is not None else "mean")
            if num_items_in_batch is not None:
                loss = loss / num_items_in_batch
        return SimpleNamespace(loss=loss, logits=logits)


@pytest.mark.parametrize("num_items", [None, 11])
def test_causal_lm_loss_without_logits(num_items):
    """patch_model makes a ForCausalLM's training loss linear_cross_entropy
    over the base model's hidden states: the same loss and gradients as the
    model's own (shifted labels, -100 ignored, mean or sum over
    num_items_in_batch), no logits built; evaluation and calls without
    labels keep the model's forward; unpatch_model restores it."""
    torch.manual_seed(0)
    model = TinyForCausalLM().train()
    ids = torch.randint(0, 97, (3, 9))
    labels = ids.clone()
    labels[0, :4] = -100
    kw = {} if num_items is None else {"num_items_in_batch": num_items}
    want = model(ids, labels=labels, **kw).loss
    want.backward()
    want_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    report = metalcore.patch_model(model)
    assert ("forward (loss)", "TinyForCausalLM") in report["swapped"], report
    metalcore.reset_call_counts()
    out = model(ids, labels=labels, **kw)
    assert out.logits is None and metalcore.call_counts().get("cross_entropy", 0) >= 1
    out.loss.backward()
    torch.testing.assert_close(out.loss, want, rtol=1e-5, atol=1e-6)
    for got, ref in zip((p.grad for p in model.parameters()), want_grads):
        torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-6)
    model.eval()
    assert model(ids, labels=labels).logits is not None
    model.train()
    assert model(ids).logits is not None
    assert metalcore.unpatch_model(model) == len(report["swapped"])
    assert "forward" not in model.__dict__


def test_causal_lm_of_another_form_is_left():
    class SoftcappedForCausalLM(TinyForCausalLM):
        pass
    model = SoftcappedForCausalLM()
    model.config.final_logit_softcapping = 30.0
    report = metalcore.patch_model(model)
    assert ("forward (loss)", "SoftcappedForCausalLM", "logits softcapped or split for tensor parallelism") in \
        report["left"], report


# ---- transformers' rotary application, as published (module functions the
# attention calls by name) -----------------------------------------------------

def rotate_half(x):
    """Rotates half the hidden dims of the input."""
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, position_ids=None, unsqueeze_dim=1):
    """Applies Rotary Position Embedding to the query and key tensors."""
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed


@pytest.fixture(autouse=True)
def restore_rotary():
    """patch_model patches this module's apply_rotary_pos_emb for every
    model defined here: each test ends with the published one back."""
    yield
    globals()["apply_rotary_pos_emb"] = getattr(apply_rotary_pos_emb, "_metalcore_original", apply_rotary_pos_emb)


class RotaryAttention(nn.Module):
    def forward(self, q, k, cos, sin):
        return apply_rotary_pos_emb(q, k, cos, sin)


def test_rotary_forms():
    """transformers 4's apply_rotary_pos_emb (with position_ids) and 5's
    (without) are both recognised; another body is not."""
    from metalcore import patching
    v5 = """
def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    \"\"\"Docs.\"\"\"
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed
"""
    assert patching._form(v5) == patching._ROPE_FORMS[False]
    assert patching._function_shape(apply_rotary_pos_emb) == patching._ROPE_FORMS[True]
    assert patching._form(v5.replace("(rotate_half(q) * sin)", "(rotate_half(q) * cos)")) not in \
        patching._ROPE_FORMS.values()


def test_rotary_application_becomes_rope():
    """patch_model makes the model's module's apply_rotary_pos_emb
    metalcore.rope where it and rotate_half are transformers' form: the same
    results, q and k as the attention's transposed views; unpatch_model puts
    the function back."""
    torch.manual_seed(0)
    q = torch.randn(2, 5, 3, 8).transpose(1, 2).requires_grad_()  # [B, H, T, D] as the attention makes it
    k = torch.randn(2, 5, 2, 8).transpose(1, 2)
    cos, sin = torch.randn(2, 5, 8), torch.randn(2, 5, 8)
    model = RotaryAttention()
    want = model(q, k, cos, sin)
    original = apply_rotary_pos_emb
    report = metalcore.patch_model(model)
    assert ("apply_rotary_pos_emb", __name__) in report["swapped"], report
    metalcore.reset_call_counts()
    got = model(q, k, cos, sin)
    assert metalcore.call_counts().get("rope", 0) == 2, metalcore.call_counts()  # q and k
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)
    (g_q,) = torch.autograd.grad(got[0].sum(), q)
    (w_q,) = torch.autograd.grad(want[0].sum(), q)
    torch.testing.assert_close(g_q, w_q)
    assert metalcore.unpatch_model(model) == len(report["swapped"])
    assert globals()["apply_rotary_pos_emb"] is original
