"""Layer 4: the public functions (metalcore.rms_norm, ...). Each computes
with the library where it takes the input, with PyTorch's own op where
PyTorch must run (under a torch.jit trace or ONNX export, in a forked
child), and otherwise raises a ValueError saying why metalcore does not take
the call (the PyTorch overrides fall back to PyTorch for such inputs)."""
import numbers

import torch

from . import _backward, _dist, _lib, _ops


def normalized(normalized_shape):
    """A normalized_shape (an int or a sequence) as a tuple."""
    if type(normalized_shape) is tuple:  # the common case, without the ABC's check
        return normalized_shape
    if isinstance(normalized_shape, numbers.Integral):
        return (int(normalized_shape),)
    return tuple(normalized_shape)


def last_dim_only(x, shape):
    """Whether the normalized shape (a tuple) is x's last dimension alone:
    what metalcore normalizes over."""
    return len(shape) == 1 and x.dim() >= 1 and x.shape[-1] == shape[0]


def sharded(what, x, params, reduces_last, ours, theirs):
    """A call on DTensor x: ours(local x, local params) on each shard where
    that is exact (_dist.shard_refused), else theirs() (PyTorch's op on the
    DTensors, counted as a fallback)."""
    why = _dist.shard_refused(x, params, reduces_last)
    if why is not None:
        _lib.fell_back(what, why)
        return theirs()
    return _dist.on_shards(x, params, ours)


def _refuse(what, why):
    """Returns where PyTorch's op is to run (the caller computes with it),
    else raises."""
    if why in _lib.PYTORCH_RUNS:
        return
    raise ValueError(f"metalcore.{what}: unsupported input: {why} (metalcore takes float32, float16 and "
                     f"bfloat16 tensors of 1 to {_lib.MAX_DIMS} dimensions, contiguous and on one device; the "
                     "PyTorch overrides fall back to PyTorch for other inputs)")


# The common dtypes' epsilons, looked up without building a torch.finfo
_DTYPE_EPS = {t: torch.finfo(t).eps for t in (torch.float16, torch.bfloat16, torch.float32, torch.float64)}


def default_eps(x):
    """RMSNorm's eps for eps=None: x's dtype's epsilon (None for a dtype
    that is not floating, which the norm then refuses as PyTorch's does)."""
    eps = _DTYPE_EPS.get(x.dtype)
    return eps if eps is not None or not x.is_floating_point() else torch.finfo(x.dtype).eps


def admit_norm(x, eps, *params):
    """(why, forms): why a norm over x's last dimension with these tensors
    (weight, bias or residual, in the kernel call's order) and eps is not
    the library's, or None and _lib.admit's Forms (a weight of the wrong
    shape is the library's to refuse, saying so)."""
    why, forms = _lib.admit(x, *params)
    # a float eps_refused would take is taken without the call
    if why is None and not (type(eps) is float and 0.0 <= eps < _lib.FLOAT32_OVERFLOW):
        why = _lib.eps_refused(eps)
    return why, forms


def weights_misfit(x, *params):
    """Why these weight/bias tensors do not fit x's rows, or None."""
    n = x.shape[-1]
    for p in params:
        if p is not None and (p.dim() != 1 or p.shape[0] != n):
            return f"a weight or bias of shape {list(p.shape)} for rows of {n}"
    return None


_MISFIT = ("weights_misfit",)  # its answer's entry in a Forms' plans


def forms_misfit(forms, x, *params):
    """weights_misfit for tensors _lib.admit took, asked once per their
    Forms (the shapes it reads are part of the forms; None, as under
    torch.compile: asked every call)."""
    if forms is None:
        return weights_misfit(x, *params)
    plans = forms.plans
    if _MISFIT not in plans:
        plans[_MISFIT] = weights_misfit(x, *params)
    return plans[_MISFIT]


def rms_norm(x, weight=None, eps=1e-6):
    """x / sqrt(mean(x^2, -1) + eps) * weight, differentiable."""
    why, forms = admit_norm(x, eps, weight)
    if why is None:
        return _ops.rms_norm(x, weight, float(eps), forms)
    if _dist.is_dtensor(x):
        return sharded("rms_norm", x, (weight,), True, lambda t, w: rms_norm(t, w, eps),
                       lambda: _backward.torch_rms_norm(x, weight, eps))
    _refuse("rms_norm", why)
    return _backward.torch_rms_norm(x, weight, eps)


def fused_add_rms_norm(x, residual, weight=None, eps=1e-6):
    """Returns (rms_norm(x + residual) * weight, x + residual) in one pass
    (inference: not differentiable)."""
    why, forms = admit_norm(x, eps, residual, weight)
    if why is None and residual.shape != x.shape:
        why = f"residual of shape {list(residual.shape)} for x of shape {list(x.shape)}"
    if why is None:
        return _ops.fused_add_rms_norm(x, residual, weight, float(eps), forms)
    if not _dist.is_dtensor(x):  # a DTensor's sum is PyTorch's, its norm rms_norm's
        _refuse("fused_add_rms_norm", why)
    out = x + residual
    return (rms_norm(out, weight, eps) if _dist.is_dtensor(out) else _backward.torch_rms_norm(out, weight, eps)), out


def _is_shape(s):
    if type(s) is torch.Tensor:  # the common case (a weight), without the ABC's check
        return False
    return isinstance(s, (numbers.Integral, tuple, list, torch.Size))


def layer_norm(x, *args, **kwargs):
    """LayerNorm over the last dimension, differentiable:
    layer_norm(x, weight=None, bias=None, eps=1e-5), or in
    torch.nn.functional.layer_norm's form, layer_norm(x, normalized_shape,
    weight=None, bias=None, eps=1e-5), normalized_shape being x's last
    dimension."""
    if (args and _is_shape(args[0])) or "normalized_shape" in kwargs:
        return _layer_norm_torch_form(x, *args, **kwargs)
    return _layer_norm(x, *args, **kwargs)


def _layer_norm(x, weight=None, bias=None, eps=1e-5):
    why, forms = admit_norm(x, eps, weight, bias)
    if why is None:
        return _ops.layer_norm(x, weight, bias, float(eps), forms)
    if _dist.is_dtensor(x):
        return sharded("layer_norm", x, (weight, bias), True, lambda t, w, b: _layer_norm(t, w, b, eps),
                       lambda: _backward.torch_layer_norm(x, x.shape[-1:], weight, bias, eps))
    _refuse("layer_norm", why)
    return _backward.torch_layer_norm(x, x.shape[-1:], weight, bias, eps)


def _layer_norm_torch_form(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    shape = normalized(normalized_shape)
    if not isinstance(x, torch.Tensor) or not last_dim_only(x, shape):
        if _lib.recording() is not None:
            return _backward.torch_layer_norm(x, normalized_shape, weight, bias, eps)
        raise ValueError(f"metalcore.layer_norm: normalized_shape {list(shape)} is not the last dimension of the "
                         "input (metalcore normalizes over the last dimension only)")
    return _layer_norm(x, weight, bias, eps)


def upcasts(x, dtype):
    """Whether softmax(x, dtype=dtype) is metalcore's float32 output of a
    16-bit x."""
    return dtype == torch.float32 and isinstance(x, torch.Tensor) and x.dtype in (torch.float16, torch.bfloat16)


def admit_softmax(x, dim, dtype):
    """(why, forms): why softmax(x, dim, dtype=dtype) is not the library's
    (a dtype= other than the input's or float32 of a 16-bit input, a dim
    other than the last), or None and _lib.admit's Forms."""
    why, forms = _lib.admit(x)
    if why is None and dtype is not None and dtype != x.dtype and not upcasts(x, dtype):
        why = f"dtype={str(dtype)[6:]} on {str(x.dtype)[6:]} input"
    if why is None and dim != -1 and (dim is None or dim != x.dim() - 1):
        why = "dim other than the last"
    return why, forms


def softmax(x, dim=-1, dtype=None):
    """Softmax over the last dimension, differentiable; dtype: None (x's),
    x's, or float32 for a 16-bit x (computed, not cast afterwards)."""
    why, forms = admit_softmax(x, dim, dtype)
    if why is None:
        return _ops.softmax(x, upcasts(x, dtype), forms)
    if _dist.is_dtensor(x):
        def theirs():
            return _backward.torch_softmax(x, dim, dtype=dtype)
        if dim is None or dim not in (-1, x.dim() - 1):
            _lib.fell_back("softmax", "dim other than the last")
            return theirs()
        return sharded("softmax", x, (), True, lambda t: softmax(t, dim, dtype), theirs)
    _refuse("softmax", why)
    return _backward.torch_softmax(x, dim, dtype=dtype)


def admit_gelu(x, approximate):
    """(why, forms), as admit_softmax."""
    why, forms = _lib.admit(x)
    if why is None and approximate not in ("none", "tanh"):
        why = f"approximate={approximate!r} (metalcore has 'none' and 'tanh')"
    return why, forms


def gelu(x, approximate="none"):
    """GELU ('none': erf, 'tanh'), differentiable."""
    why, forms = admit_gelu(x, approximate)
    if why is None:
        return _ops.gelu(x, approximate == "tanh", forms)
    if _dist.is_dtensor(x):
        return sharded("gelu", x, (), False, lambda t: gelu(t, approximate),
                       lambda: _backward.torch_gelu(x, approximate=approximate))
    _refuse("gelu", why)
    return _backward.torch_gelu(x, approximate=approximate)


def silu(x):
    """SiLU, differentiable."""
    why, forms = _lib.admit(x)
    if why is None:
        return _ops.silu(x, forms)
    if _dist.is_dtensor(x):
        return sharded("silu", x, (), False, silu, lambda: _backward.torch_silu(x))
    _refuse("silu", why)
    return _backward.torch_silu(x)


def _glu(name, gate, up, kind):
    """act(gate) * up by the library where it takes the tensors (copied
    contiguous where they are not), else PyTorch's ops (counted): under
    a trace, other dtypes, shapes that broadcast (under torch.compile, the
    custom ops)."""
    why = _lib.unsupported_any_layout(gate)
    if why is None:
        if type(up) not in (torch.Tensor, torch.nn.Parameter):
            why = "up not a tensor"
        elif up.shape != gate.shape or up.dtype != gate.dtype or up.device != gate.device:
            why = "up not of gate's shape, dtype and device"
    if why is not None:
        _lib.pytorch_computes(name, why)
        return _backward.torch_glu(gate, up, kind)
    return _ops.glu(gate.contiguous(), up.contiguous(), kind)


def swiglu(gate, up):
    """F.silu(gate) * up in one pass (and its backward in one), differentiable."""
    return _glu("swiglu", gate, up, 0)


def geglu(gate, up, approximate="none"):
    """F.gelu(gate, approximate=approximate) * up in one pass, differentiable."""
    if approximate not in ("none", "tanh"):
        raise ValueError(f"metalcore.geglu: approximate={approximate!r} (F.gelu takes 'none' and 'tanh')")
    return _glu("geglu", gate, up, 2 if approximate == "tanh" else 1)


def _rope_refused(q, k, cos, sin):
    for t in (q, k, cos, sin):
        why = _lib.unsupported_any_layout(t)
        if why is not None:
            return why
    if q.dim() != 4 or k.dim() != 4 or cos.dim() != 3 or sin.shape != cos.shape:
        return "not q, k [B, H, T, D] and cos, sin [B, T, D]"
    b, _, t, d = q.shape
    if d % 2 or k.shape[0] != b or k.shape[2:] != q.shape[2:] or cos.shape[0] not in (1, b) or \
            cos.shape[1:] != (t, d):
        return "shapes that do not match"
    if len({q.dtype, k.dtype, cos.dtype, sin.dtype}) > 1 or len({q.device, k.device, cos.device, sin.device}) > 1:
        return "mixed dtypes or devices"
    if cos.requires_grad or sin.requires_grad:
        return "a gradient wanted for cos or sin"
    return None


def rope(q, k, cos, sin):
    """Hugging Face's apply_rotary_pos_emb(q, k, cos, sin) (rotate_half form,
    cos and sin broadcast over the heads): (q_embed, k_embed), each laid out
    as its input (as PyTorch's expression lays it out), differentiable in q
    and k, their gradients laid out as q and k. q and k may be the transposed views models
    make; other inputs are PyTorch's expression (counted)."""
    why = _rope_refused(q, k, cos, sin)
    if why is not None:
        _lib.pytorch_computes("rope", why)
        return _backward.torch_rope(q, k, cos, sin)
    unit = [t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, cos, sin)]  # the kernel's one requirement
    return _ops.rope(*unit)


__all__ = ["fused_add_rms_norm", "geglu", "gelu", "layer_norm", "rms_norm", "rope", "silu", "softmax", "swiglu"]
