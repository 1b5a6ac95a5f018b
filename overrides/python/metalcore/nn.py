"""Modules with PyTorch's signatures and state_dict layout, computed by
metalcore where it takes the input and by PyTorch's own arithmetic
elsewhere: RMSNorm, LayerNorm, FusedAddRMSNorm, SiLU, GELU, Softmax."""
import numbers

import torch
import torch.nn.functional as F

from . import _ops


def _shape(normalized_shape):
    if isinstance(normalized_shape, numbers.Integral):
        return (int(normalized_shape),)
    return tuple(normalized_shape)


def _last_dim_only(x, shape):
    """Whether the normalized shape is x's last dimension alone (what
    metalcore normalizes over)."""
    return len(shape) == 1 and x.dim() >= 1 and x.shape[-1] == shape[0]


class RMSNorm(torch.nn.Module):
    """torch.nn.RMSNorm (normalized_shape, eps=None: the input dtype's
    epsilon, elementwise_affine, device, dtype) with metalcore's kernels."""

    def __init__(self, normalized_shape, eps=None, elementwise_affine=True, device=None, dtype=None):
        super().__init__()
        self.normalized_shape = _shape(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = torch.nn.Parameter(torch.ones(self.normalized_shape, device=device, dtype=dtype))
        else:
            self.register_parameter("weight", None)

    def forward(self, x):
        eps = torch.finfo(x.dtype).eps if self.eps is None and x.is_floating_point() else self.eps
        if _last_dim_only(x, self.normalized_shape) and _ops.supported(x, self.weight):
            return _ops.rms_norm_unchecked(x, self.weight, eps)
        dims = tuple(range(-len(self.normalized_shape), 0))
        xf = x.float()
        y = (xf * torch.rsqrt(xf.pow(2).mean(dims, keepdim=True) + eps)).to(x.dtype)
        return y if self.weight is None else y * self.weight

    def extra_repr(self):
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


class LayerNorm(torch.nn.LayerNorm):
    """torch.nn.LayerNorm (same arguments and parameters) with metalcore's
    kernels."""

    def forward(self, x):
        if _last_dim_only(x, self.normalized_shape) and _ops.supported(x, self.weight, self.bias):
            return _ops.layer_norm_unchecked(x, self.weight, self.bias, self.eps)
        return super().forward(x)


class FusedAddRMSNorm(RMSNorm):
    """RMSNorm(x + residual), returning (y, x + residual) computed in one
    pass (the pre-norm transformer's residual stream); where a gradient is
    wanted, the sum and the norm are PyTorch's and metalcore's own ops."""

    def forward(self, x, residual):
        differentiable = torch.is_grad_enabled() and any(
            t is not None and t.requires_grad for t in (x, residual, self.weight))
        if (not differentiable and _last_dim_only(x, self.normalized_shape) and
                _ops.supported(x, residual, self.weight)):
            eps = torch.finfo(x.dtype).eps if self.eps is None else self.eps
            return _ops.fused_add_rms_norm(x, residual, self.weight, eps)
        total = x + residual
        return super().forward(total), total


class SiLU(torch.nn.SiLU):
    """torch.nn.SiLU (inplace is PyTorch's) with metalcore's kernels."""

    def forward(self, x):
        if not self.inplace and _ops.supported(x):
            return _ops.silu_unchecked(x)
        return super().forward(x)


class GELU(torch.nn.GELU):
    """torch.nn.GELU (approximate='none' or 'tanh') with metalcore's kernels."""

    def forward(self, x):
        if _ops.supported(x):
            return _ops.gelu_unchecked(x, self.approximate)
        return super().forward(x)


class Softmax(torch.nn.Softmax):
    """torch.nn.Softmax with metalcore's kernels over the last dimension."""

    def forward(self, x):
        if self.dim is not None and _ops.supported(x) and self.dim in (-1, x.dim() - 1):
            return _ops.softmax_unchecked(x)
        return super().forward(x)


__all__ = ["FusedAddRMSNorm", "GELU", "LayerNorm", "RMSNorm", "SiLU", "Softmax"]
