"""Layer 4: metalcore.patch_model swaps, in place, the submodules of a model
that compute RMSNorm, LayerNorm, SiLU, GELU, softmax or a SiLU-gated MLP for
metalcore's modules, keeping their parameters (the same Parameter objects: optimizers
and state_dict keys are unchanged); unpatch_model puts the originals back.
A module of another class is swapped only when its forward is, statement
for statement, a form known to compute what metalcore's module computes.
A causal language model of transformers' form (Llama, Qwen2, Mistral:
ForCausalLM over a base model and an lm_head Linear) computes its training
loss through metalcore.linear_cross_entropy, never building the logits."""
import ast
import inspect
import sys
import textwrap
import types

import torch

from . import functional, losses, nn

# PyTorch's module classes and metalcore's, by exact class (a subclass may
# have changed forward)
_SWAPS = {torch.nn.LayerNorm: nn.LayerNorm, torch.nn.SiLU: nn.SiLU, torch.nn.GELU: nn.GELU,
          torch.nn.Softmax: nn.Softmax}
if hasattr(torch.nn, "RMSNorm"):
    _SWAPS[torch.nn.RMSNorm] = nn.RMSNorm


def _shape_of(tree):
    """A forward's syntax tree with what does not change its meaning taken
    out: the docstring, annotations, and the names of its arguments and
    locals (numbered by first appearance; self, torch and the module
    aliases stay)."""
    fn = tree.body[0]
    body = fn.body[1:] if (fn.body and isinstance(fn.body[0], ast.Expr) and
                           isinstance(fn.body[0].value, ast.Constant) and
                           isinstance(fn.body[0].value.value, str)) else fn.body
    names = {}
    for a in fn.args.args[1:]:
        names[a.arg] = f"v{len(names)}"

    class Rename(ast.NodeTransformer):
        def visit_Name(self, node):
            if isinstance(node.ctx, ast.Store) and node.id not in names:
                names[node.id] = f"v{len(names)}"
            return ast.copy_location(ast.Name(id=names.get(node.id, node.id), ctx=node.ctx), node)

    body = [Rename().visit(stmt) for stmt in body]
    return [len(fn.args.args), fn.args.vararg is None and fn.args.kwarg is None and not fn.args.kwonlyargs,
            fn.args.defaults == []] + [ast.dump(stmt) for stmt in body]


def _form(source):
    return _shape_of(ast.parse(textwrap.dedent(source)))


def _forward_shape(module):
    try:
        return _shape_of(ast.parse(textwrap.dedent(inspect.getsource(type(module).forward))))
    except (OSError, TypeError, SyntaxError, IndexError, AttributeError):
        return None


# transformers' LlamaRMSNorm (and Qwen2's, Mistral's, ...: the same code):
# float32 statistics, eps added, the result cast back, then weight times it.
# metalcore's RMSNorm computes this where weight and input share a dtype
# (elsewhere it computes it in these very ops).
_RMS_FORM = """
def forward(self, hidden_states):
    input_dtype = hidden_states.dtype
    hidden_states = hidden_states.to(torch.float32)
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    hidden_states = hidden_states * torch.rsqrt(variance + self.{eps})
    return self.weight * hidden_states.to(input_dtype)
"""
_RMS_FORMS = {eps: _form(_RMS_FORM.format(eps=eps)) for eps in ("variance_epsilon", "eps")}

# An activation module whose forward only returns silu of its input
# (transformers' SiLUActivation, ACT2FN["silu"] since transformers 5).
_SILU_FORMS = [_form(f"def forward(self, input):\n    return {fn}(input)\n")
               for fn in ("torch.nn.functional.silu", "nn.functional.silu", "F.silu", "torch.silu")]


# transformers' LlamaMLP (Mistral's) and Qwen2MLP: a gated MLP whose
# product metalcore.swiglu computes where act_fn is SiLU.
_MLP_FORMS = [_form("def forward(self, x):\n    down_proj = self.down_proj(self.act_fn(self.gate_proj(x)) * "
                    "self.up_proj(x))\n    return down_proj\n"),
              _form("def forward(self, x):\n    return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))\n")]


# transformers' apply_rotary_pos_emb and rotate_half (Llama, Qwen2, Mistral:
# the same code), module functions their attention calls by name, which
# metalcore.rope computes; transformers 5 dropped the unused position_ids.
_ROPE_SOURCE = """
def apply_rotary_pos_emb(q, k, cos, sin, {extra}unsqueeze_dim=1):
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed
"""
_ROPE_FORMS = {True: _form(_ROPE_SOURCE.format(extra="position_ids=None, ")), False: _form(_ROPE_SOURCE.format(extra=""))}
_ROTATE_HALF_FORM = _form("""
def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)
""")


def _function_shape(fn):
    try:
        return _form(inspect.getsource(fn))
    except (OSError, TypeError, SyntaxError, IndexError):
        return None


def _rope_for(original, position_ids):
    """apply_rotary_pos_emb, with the original's parameters, through
    metalcore.rope (cos and sin broadcast over the heads, unsqueeze_dim 1,
    as the attention calls it), the original otherwise."""
    if position_ids:
        def apply_rotary_pos_emb(q, k, cos, sin, position_ids=None, unsqueeze_dim=1):
            if unsqueeze_dim != 1:
                return original(q, k, cos, sin, position_ids, unsqueeze_dim)
            return functional.rope(q, k, cos, sin)
    else:
        def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
            if unsqueeze_dim != 1:
                return original(q, k, cos, sin, unsqueeze_dim)
            return functional.rope(q, k, cos, sin)
    apply_rotary_pos_emb._metalcore_original = original
    return apply_rotary_pos_emb


def _patch_rope(model, report):
    """Makes the model's module's apply_rotary_pos_emb metalcore.rope where
    it and rotate_half are transformers' form. The function is the module's:
    every model of that module uses it until unpatch_model."""
    module = sys.modules.get(type(model).__module__)
    fn = getattr(module, "apply_rotary_pos_emb", None)
    if fn is None or hasattr(fn, "_metalcore_original"):
        return
    shape = _function_shape(fn)
    forms = [k for k, form in _ROPE_FORMS.items() if form == shape]
    if not forms or _function_shape(getattr(module, "rotate_half", None)) != _ROTATE_HALF_FORM:
        report["left"].append(("apply_rotary_pos_emb", module.__name__, "not the recognised rotate_half form"))
        return
    module.apply_rotary_pos_emb = _rope_for(fn, forms[0])
    report["swapped"].append(("apply_rotary_pos_emb", module.__name__))


def _silu_module(module):
    """Whether module computes SiLU (torch.nn.SiLU not in place, or an
    activation module of the recognised form)."""
    if type(module) is torch.nn.SiLU:
        return not module.inplace
    return "SiLU" in type(module).__name__ and next(module.parameters(), None) is None and \
        not list(module.children()) and _forward_shape(module) in _SILU_FORMS


def _mlp_form(module):
    """metalcore's SwiGLUMLP over module's own projections, or None, and why not."""
    if _forward_shape(module) not in _MLP_FORMS:
        return None, "forward is not the recognised gated MLP form (transformers' LlamaMLP, statement for statement)"
    if not all(isinstance(getattr(module, n, None), torch.nn.Linear) for n in ("gate_proj", "up_proj", "down_proj")):
        return None, "gate_proj, up_proj or down_proj is not a torch.nn.Linear"
    if not _silu_module(getattr(module, "act_fn", None)):
        return None, "act_fn is not SiLU"
    new = nn.SwiGLUMLP.__new__(nn.SwiGLUMLP)
    new.__dict__.update(module.__dict__)  # the same submodules and settings
    return new, None


def _rms_norm_form(module):
    """metalcore's RMSNorm computing what module computes, or None, and why
    not."""
    weight = getattr(module, "weight", None)
    attr = "variance_epsilon" if hasattr(module, "variance_epsilon") else "eps"
    eps = getattr(module, attr, None)
    if not isinstance(weight, torch.nn.Parameter) or weight.dim() != 1 or not isinstance(eps, float):
        return None, "no 1-D weight parameter and float variance_epsilon or eps"
    if _forward_shape(module) != _RMS_FORMS[attr]:
        return None, "forward is not the recognised RMSNorm form (transformers' LlamaRMSNorm, statement for statement)"
    new = nn.RMSNorm(weight.shape[0], eps=eps, device=weight.device, dtype=weight.dtype)
    new.weight = weight
    return new, None


def _replacement(module):
    """(metalcore's module for module, None), (None, why it is left), or
    (None, None) for a module of no kind metalcore computes."""
    cls = _SWAPS.get(type(module))
    if cls is not None:
        new = cls.__new__(cls)
        new.__dict__.update(module.__dict__)  # the same parameters, buffers and settings
        return new, None
    if isinstance(module, tuple(_SWAPS)):
        return None, f"a subclass of {type(module).__mro__[1].__name__}: its forward may differ"
    if type(module).__name__.endswith("RMSNorm"):
        return _rms_norm_form(module)
    if "SiLU" in type(module).__name__:
        if _silu_module(module):
            return nn.SiLU(), None
        return None, "forward is not the recognised SiLU form (return silu(input))"
    if type(module).__name__.endswith("MLP"):
        return _mlp_form(module)
    return None, None


class CausalLMOutput:
    """What the patched forward returns where transformers' output class
    cannot be imported: the loss, and no logits."""

    def __init__(self, loss, past_key_values=None, hidden_states=None, attentions=None):
        self.loss, self.logits = loss, None
        self.past_key_values, self.hidden_states, self.attentions = past_key_values, hidden_states, attentions


def _causal_lm_form(model):
    """None when model's loss can be computed by linear_cross_entropy from
    its base model's hidden states (transformers' ForCausalLM form), else
    why not."""
    lm_head = getattr(model, "lm_head", None)
    if not isinstance(lm_head, torch.nn.Linear) or not isinstance(getattr(model, "model", None), torch.nn.Module):
        return "no lm_head Linear over a base model"
    config = getattr(model, "config", None)
    if getattr(config, "final_logit_softcapping", None) or (getattr(config, "pretraining_tp", 1) or 1) > 1:
        return "logits softcapped or split for tensor parallelism"
    if "forward" in model.__dict__:
        return "forward already replaced on the instance"
    return None


def _causal_lm_forward(self, input_ids=None, *args, labels=None, **kwargs):
    """transformers' ForCausalLM forward, whose training loss (labels given,
    the model training) is linear_cross_entropy over the base model's hidden
    states: the loss of transformers' ForCausalLMLoss (labels shifted left,
    -100 ignored, the mean, or the sum over num_items_in_batch), with no
    logits built. Evaluation, and a call without labels, run the original."""
    if labels is None or not self.training:
        return type(self).forward(self, input_ids, *args, labels=labels, **kwargs)
    num_items = kwargs.pop("num_items_in_batch", None)
    shift_labels = kwargs.pop("shift_labels", None)
    kwargs.pop("logits_to_keep", None)
    out = self.model(input_ids, *args, **kwargs)
    hidden = out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]
    if shift_labels is None:
        hidden, targets = hidden[..., :-1, :], labels[..., 1:]
    else:
        targets = shift_labels
    loss = losses.linear_cross_entropy(hidden.reshape(-1, hidden.shape[-1]), self.lm_head.weight,
                                       targets.reshape(-1).to(hidden.device), self.lm_head.bias,
                                       reduction="mean" if num_items is None else "sum")
    if num_items is not None:
        loss = loss / (num_items.to(loss.device) if isinstance(num_items, torch.Tensor) else num_items)
    extra = {k: getattr(out, k, None) for k in ("past_key_values", "hidden_states", "attentions")}
    try:
        from transformers.modeling_outputs import CausalLMOutputWithPast
    except ImportError:
        return CausalLMOutput(loss, **extra)
    return CausalLMOutputWithPast(loss=loss, logits=None, **extra)


def patch_model(model):
    """Swaps, in place, every submodule metalcore computes exactly and
    returns a report: {"swapped": [(name, class)], "left": [(name, class,
    why)]}; a causal language model's loss (see _causal_lm_forward) is
    reported as ("forward (loss)", class), and the model's module's
    apply_rotary_pos_emb made metalcore.rope (for every model of that
    module) as ("apply_rotary_pos_emb", module). Call unpatch_model to
    restore."""
    report = {"swapped": [], "left": []}
    _patch_rope(model, report)
    if type(model).__name__.endswith("ForCausalLM"):
        why = _causal_lm_form(model)
        if why is None:
            model.forward = types.MethodType(_causal_lm_forward, model)
            report["swapped"].append(("forward (loss)", type(model).__name__))
        else:
            report["left"].append(("forward (loss)", type(model).__name__, why))
    replaced = set()  # ids of the modules swapped: their children go with them (a swapped MLP's act_fn is unused)
    for name, parent in list(model.named_modules()):
        if id(parent) in replaced:
            continue
        for child_name, child in list(parent.named_children()):
            full = f"{name}.{child_name}" if name else child_name
            new, why = _replacement(child)
            if new is not None:
                object.__setattr__(new, "_metalcore_original", child)  # not a submodule: not in state_dict
                setattr(parent, child_name, new)
                replaced.add(id(child))
                report["swapped"].append((full, type(child).__name__))
            elif why is not None:
                report["left"].append((full, type(child).__name__, why))
    return report


def unpatch_model(model):
    """Puts back every module patch_model swapped; returns how many."""
    restored = 0
    module = sys.modules.get(type(model).__module__)
    original = getattr(getattr(module, "apply_rotary_pos_emb", None), "_metalcore_original", None)
    if original is not None:
        module.apply_rotary_pos_emb = original
        restored += 1
    forward = model.__dict__.get("forward")
    if getattr(forward, "__func__", None) is _causal_lm_forward:
        del model.forward
        restored += 1
    for _, parent in list(model.named_modules()):
        for child_name, child in list(parent.named_children()):
            original = child.__dict__.get("_metalcore_original")
            if original is not None:
                setattr(parent, child_name, original)
                restored += 1
    return restored
