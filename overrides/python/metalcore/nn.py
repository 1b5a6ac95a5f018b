"""Layer 4: modules with PyTorch's signatures and state_dict layout,
computed by metalcore where it takes the input and by PyTorch's own
arithmetic elsewhere (and under a torch.jit trace): RMSNorm, LayerNorm,
FusedAddRMSNorm, SiLU, GELU, Softmax. torch.jit.script compiles each as
the PyTorch module it mirrors, with the same parameters."""
from typing import List, Optional

import torch

from . import _backward, _dist, _lib, _ops, functional
from .functional import admit_gelu, admit_norm, admit_softmax, default_eps, last_dim_only, normalized


def _scripted_rms_norm(x: torch.Tensor, dims: List[int], eps: Optional[float],
                       weight: Optional[torch.Tensor]) -> torch.Tensor:
    """RMSNorm in PyTorch's ops as TorchScript compiles it."""
    if eps is None:  # the input dtype's epsilon (torch.finfo, which TorchScript lacks)
        eps = 1.1920928955078125e-07
        if x.dtype == torch.float16:
            eps = 0.0009765625
        elif x.dtype == torch.bfloat16:
            eps = 0.0078125
        elif x.dtype == torch.float64:
            eps = 2.220446049250313e-16
    xf = x if x.dtype == torch.float64 else x.float()
    y = (xf * torch.rsqrt(xf.pow(2).mean(dims, keepdim=True) + eps)).to(x.dtype)
    if weight is not None:
        y = y * weight
    return y


class _ScriptedRMSNorm(torch.nn.Module):
    """What metalcore's RMSNorm becomes under torch.jit.script."""
    eps: Optional[float]
    dims: List[int]

    def __init__(self, normalized_shape, eps, weight):
        super().__init__()
        self.dims = [-1 - i for i in range(len(normalized_shape))]
        self.eps = eps
        self.weight = weight

    def forward(self, x):
        return _scripted_rms_norm(x, self.dims, self.eps, self.weight)


class RMSNorm(torch.nn.Module):
    """torch.nn.RMSNorm (normalized_shape, eps=None: the input dtype's
    epsilon, elementwise_affine, device, dtype) with metalcore's kernels."""

    def __init__(self, normalized_shape, eps=None, elementwise_affine=True, device=None, dtype=None):
        super().__init__()
        self.normalized_shape = normalized(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = torch.nn.Parameter(torch.ones(self.normalized_shape, device=device, dtype=dtype))
        else:
            self.register_parameter("weight", None)

    def forward(self, x):
        eps, weight = self.eps, _param(self, "weight")
        if eps is None:
            eps = default_eps(x)
        if last_dim_only(x, self.normalized_shape):
            why, forms = admit_norm(x, eps, weight)
            if why is None:
                return _ops.rms_norm(x, weight, float(eps), forms)
            if _dist.is_dtensor(x):  # each shard's, where that is exact
                return functional.rms_norm(x, weight, eps)
        return _backward.torch_rms_norm(x, weight, eps, tuple(range(-len(self.normalized_shape), 0)))

    def extra_repr(self):
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"

    def __prepare_scriptable__(self):
        return _ScriptedRMSNorm(self.normalized_shape, self.eps, self.weight)


def _param(module, name):
    """module.name, taken from its parameters where it is one there (a
    Module.__getattr__ costs a third of a microsecond); else the attribute
    (a parametrization's property, or a tensor a hook set)."""
    params = module._parameters
    return params[name] if name in params else getattr(module, name)


def _torch_twin(module, cls):
    """A PyTorch module of class cls with module's settings and the same
    parameters (for torch.jit.script)."""
    twin = cls.__new__(cls)
    twin.__dict__.update(module.__dict__)
    return twin


class LayerNorm(torch.nn.LayerNorm):
    """torch.nn.LayerNorm (same arguments and parameters) with metalcore's
    kernels."""

    def forward(self, x):
        weight, bias = _param(self, "weight"), _param(self, "bias")
        if last_dim_only(x, self.normalized_shape):
            why, forms = admit_norm(x, self.eps, weight, bias)
            if why is None:
                return _ops.layer_norm(x, weight, bias, float(self.eps), forms)
            if _dist.is_dtensor(x):
                return functional.layer_norm(x, weight, bias, self.eps)
        return super().forward(x)

    def __prepare_scriptable__(self):
        return _torch_twin(self, torch.nn.LayerNorm)


class _ScriptedFusedAddRMSNorm(_ScriptedRMSNorm):
    def forward(self, x, residual):
        total = x + residual
        return _scripted_rms_norm(total, self.dims, self.eps, self.weight), total


class FusedAddRMSNorm(RMSNorm):
    """RMSNorm(x + residual), returning (y, x + residual) computed in one
    pass (the pre-norm transformer's residual stream); where a gradient is
    wanted, the sum and the norm are PyTorch's and metalcore's own ops."""

    def forward(self, x, residual):
        eps, weight = default_eps(x) if self.eps is None else self.eps, _param(self, "weight")
        if not _ops._wants_grad(x, residual, weight) and last_dim_only(x, self.normalized_shape):
            why, forms = admit_norm(x, eps, residual, weight)
            if why is None and residual.shape == x.shape:
                return _ops.fused_add_rms_norm(x, residual, weight, float(eps), forms)
        total = x + residual
        return super().forward(total), total

    def __prepare_scriptable__(self):
        return _ScriptedFusedAddRMSNorm(self.normalized_shape, self.eps, self.weight)


class SiLU(torch.nn.SiLU):
    """torch.nn.SiLU (inplace is PyTorch's) with metalcore's kernels."""

    def forward(self, x):
        if not self.inplace:
            why, forms = _lib.admit(x)
            if why is None:
                return _ops.silu(x, forms)
            if _dist.is_dtensor(x):
                return functional.silu(x)
        return super().forward(x)

    def __prepare_scriptable__(self):
        return _torch_twin(self, torch.nn.SiLU)


class GELU(torch.nn.GELU):
    """torch.nn.GELU (approximate='none' or 'tanh') with metalcore's kernels."""

    def forward(self, x):
        why, forms = admit_gelu(x, self.approximate)
        if why is None:
            return _ops.gelu(x, self.approximate == "tanh", forms)
        if _dist.is_dtensor(x):
            return functional.gelu(x, self.approximate)
        return super().forward(x)

    def __prepare_scriptable__(self):
        return _torch_twin(self, torch.nn.GELU)


class Softmax(torch.nn.Softmax):
    """torch.nn.Softmax with metalcore's kernels over the last dimension."""

    def forward(self, x):
        why, forms = admit_softmax(x, self.dim, None)
        if why is None:
            return _ops.softmax(x, False, forms)
        if _dist.is_dtensor(x):
            return functional.softmax(x, self.dim)
        return super().forward(x)

    def __prepare_scriptable__(self):
        return _torch_twin(self, torch.nn.Softmax)


class SwiGLUMLP(torch.nn.Module):
    """The gated MLP of Llama-style models, down_proj(silu(gate_proj(x)) *
    up_proj(x)), with the product from metalcore.swiglu (one pass, and one
    for its backward). patch_model makes it out of a model's own MLP: the
    same gate_proj, up_proj and down_proj (and act_fn, unused), so
    parameters and state_dict keys are unchanged."""

    def forward(self, x):
        return self.down_proj(functional.swiglu(self.gate_proj(x), self.up_proj(x)))


__all__ = ["FusedAddRMSNorm", "GELU", "LayerNorm", "RMSNorm", "SiLU", "Softmax", "SwiGLUMLP"]
