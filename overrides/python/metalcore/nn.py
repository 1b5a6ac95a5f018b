"""Modules."""
import torch

from . import _ops


class RMSNorm(torch.nn.Module):
    """RMSNorm over the last dimension with a learned weight; PyTorch's own
    arithmetic for inputs metalcore does not take."""

    def __init__(self, dim, eps=1e-6, device=None, dtype=None):
        super().__init__()
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.ones(dim, device=device, dtype=dtype))

    def forward(self, x):
        if _ops.supported(x, self.weight):
            return _ops.rms_norm(x, self.weight, self.eps)
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return y.to(x.dtype) * self.weight
