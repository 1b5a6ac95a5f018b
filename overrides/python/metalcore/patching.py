"""metalcore.patch_model: swap, in place, the submodules of a model that
compute RMSNorm, LayerNorm, SiLU, GELU or softmax for metalcore's modules,
keeping their parameters (the same Parameter objects: optimizers and
state_dict keys are unchanged); unpatch_model puts the originals back."""
import inspect
import re

import torch

from . import nn

# PyTorch's module classes and metalcore's, by exact class (a subclass may
# have changed forward)
_SWAPS = {torch.nn.LayerNorm: nn.LayerNorm, torch.nn.SiLU: nn.SiLU, torch.nn.GELU: nn.GELU,
          torch.nn.Softmax: nn.Softmax}
if hasattr(torch.nn, "RMSNorm"):
    _SWAPS[torch.nn.RMSNorm] = nn.RMSNorm

# The RMSNorm form of transformers' LlamaRMSNorm, Qwen2RMSNorm, MistralRMSNorm
# (float32 variance, eps added, output cast back and multiplied by weight),
# recognised in forward's source with its whitespace removed.
_RMS_FORM = [r"\.to\(torch\.float32\)", r"\.pow\(2\)\.mean\(-1,keepdim=True\)", r"torch\.rsqrt\(",
             r"self\.weight\*\w+\.to\(\w+\)"]
_NOT_RMS_FORM = [r"1(\.0)?\+self\.weight"]  # Gemma's (1 + weight) scaling

# An activation module whose forward only returns silu of its input (transformers'
# SiLUActivation, ACT2FN["silu"] since transformers 5), source without whitespace.
_SILU_FORM = re.compile(r"defforward\(self,(\w+)[^)]*\)(->[\w.]+)?:(\"\"\".*?\"\"\")?"
                        r"return(torch\.nn\.functional\.|nn\.functional\.|F\.|torch\.)silu\(\1\)")


def _forward_source(module):
    try:
        return re.sub(r"\s+", "", inspect.getsource(type(module).forward))
    except (OSError, TypeError):
        return ""


def _rms_norm_form(module):
    """metalcore's RMSNorm computing what module computes, or None, and why
    not."""
    weight = getattr(module, "weight", None)
    eps = getattr(module, "variance_epsilon", getattr(module, "eps", None))
    if not isinstance(weight, torch.nn.Parameter) or weight.dim() != 1 or not isinstance(eps, float):
        return None, "no 1-D weight parameter and float variance_epsilon or eps"
    src = _forward_source(module)
    if not all(re.search(p, src) for p in _RMS_FORM) or any(re.search(p, src) for p in _NOT_RMS_FORM):
        return None, "forward is not the recognised RMSNorm form (float32 variance, weight * output cast back)"
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
        if next(module.parameters(), None) is None and not list(module.children()) and \
                _SILU_FORM.fullmatch(_forward_source(module)):
            return nn.SiLU(), None
        return None, "forward is not the recognised SiLU form (return silu(input))"
    return None, None


def patch_model(model):
    """Swaps, in place, every submodule metalcore computes exactly and
    returns a report: {"swapped": [(name, class)], "left": [(name, class,
    why)]}. Call unpatch_model to restore."""
    report = {"swapped": [], "left": []}
    for name, parent in list(model.named_modules()):
        for child_name, child in list(parent.named_children()):
            full = f"{name}.{child_name}" if name else child_name
            new, why = _replacement(child)
            if new is not None:
                object.__setattr__(new, "_metalcore_original", child)  # not a submodule: not in state_dict
                setattr(parent, child_name, new)
                report["swapped"].append((full, type(child).__name__))
            elif why is not None:
                report["left"].append((full, type(child).__name__, why))
    return report


def unpatch_model(model):
    """Puts back every module patch_model swapped; returns how many."""
    restored = 0
    for _, parent in list(model.named_modules()):
        for child_name, child in list(parent.named_children()):
            original = child.__dict__.get("_metalcore_original")
            if original is not None:
                setattr(parent, child_name, original)
                restored += 1
    return restored
