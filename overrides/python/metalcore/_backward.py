"""Layer 3: each op's backward, shared by the autograd Functions (eager)
and the custom ops (torch.compile). Each takes the backward kernels to call
(_kernels' functions, or the custom backward ops, which torch.compile
traces where it could not trace a ctypes call). A backward run with
create_graph is computed in PyTorch's differentiable ops instead, so that a
second derivative is PyTorch's."""
import math

import torch
import torch.nn.functional as F

# PyTorch's own functions, taken before any override is installed.
torch_gelu, torch_silu, torch_softmax, torch_layer_norm = F.gelu, F.silu, F.softmax, F.layer_norm


def torch_rms_norm(x, weight, eps, dims=(-1,)):
    """RMSNorm in PyTorch's ops: the statistics in float32 (float64 for a
    float64 x, as PyTorch's own computes them), the result cast back to x's
    dtype, then times weight. The mean is a sum divided (as PyTorch's mean
    computes it), which a DTensor sharded on dims reduces with a sum: gloo
    has no average."""
    xf = x if x.dtype == torch.float64 else x.float()
    n = math.prod(x.shape[d] for d in dims)
    y = (xf * torch.rsqrt(xf.pow(2).sum(dims, keepdim=True) / n + eps)).to(x.dtype)
    return y if weight is None else y * weight


def cholesky(l, gl, upper):
    """PyTorch's gradient of A for the gradient gl of its Cholesky factor l
    (Murray 2016, as torch's cholesky_backward), in float32 for 16-bit
    factors, returned in l's dtype."""
    lf, g = l.float(), gl.float()
    if upper:
        lf, g = lf.mH, g.mH
    ga = (lf.mH @ g).tril()
    ga = 0.5 * (ga + ga.tril(-1).mH)
    ga = torch.linalg.solve_triangular(lf.mH, ga, upper=True, left=True)
    return torch.linalg.solve_triangular(lf, ga, upper=False, left=False).to(l.dtype)


def eigh(gw, gv, w, v):
    """PyTorch's gradient of A for the gradients gw, gv (either None) of
    its eigenvalues w and eigenvectors v (linalg_eig_backward's Hermitian
    case): V (diag(gw) + skew(Vᵀ gV) / (w_j - w_i)) Vᵀ, in PyTorch's
    differentiable ops."""
    gw = torch.zeros_like(w) if gw is None else gw
    if gv is None:
        inner = torch.diag_embed(gw)
    else:
        vgv = v.mT @ gv
        gaps = w.unsqueeze(-2) - w.unsqueeze(-1)
        gaps = gaps + torch.eye(w.shape[-1], dtype=w.dtype, device=w.device)  # 1 on the diagonal
        inner = 0.5 * (vgv - vgv.mT) / gaps
        inner = inner - torch.diag_embed(inner.diagonal(0, -2, -1)) + torch.diag_embed(gw)
    return v @ inner @ v.mT


def svd(gu, gs, gvh, u, s, vh):
    """PyTorch's gradient of A for the gradients gu, gs, gvh (any None) of
    its thin SVD A = U diag(S) Vh (svd_backward's real case), in PyTorch's
    differentiable ops: U ((skew(Uᵀ gU) S + S skew(Vh gVhᵀ)) / (S_j² - S_i²)
    + diag(gS)) Vh, plus gU's and gVh's parts outside U's and Vh's spans
    for a tall and a wide A."""
    m, n = u.shape[-2], vh.shape[-1]
    if gu is None and gvh is None:
        return (u * gs.unsqueeze(-2)) @ vh
    col, row = s.unsqueeze(-2), s.unsqueeze(-1)
    gaps = col * col - row * row
    gaps = gaps + torch.eye(s.shape[-1], dtype=s.dtype, device=s.device)  # 1 on the diagonal, whose terms are 0
    inner = torch.zeros_like(gaps)
    if gu is not None:
        ugu = u.mT @ gu
        inner = inner + (ugu - ugu.mT) * col
    if gvh is not None:
        vgv = vh @ gvh.mT
        inner = inner + row * (vgv - vgv.mT)
    inner = inner / gaps
    if gs is not None:
        inner = inner + torch.diag_embed(gs)
    if m > n and gu is not None:  # (I - U Uᵀ) gU S⁻¹ Vh
        gus = gu / col
        return (u @ inner + gus - u @ (u.mT @ gus)) @ vh
    if m < n and gvh is not None:  # U S⁻¹ gVh (I - Vhᵀ Vh)
        sgv = gvh / row
        return u @ (inner @ vh + sgv - (sgv @ vh.mT) @ vh)
    return u @ inner @ vh


def solve(kernels, a, x, gx, needs):
    """PyTorch's gradients (of A, of B) of X = A⁻¹ B for gx: gB = A⁻ᵀ gX,
    gA = −gB Xᵀ; through PyTorch's differentiable ops where a graph is
    being built, else gB by the library."""
    if torch.is_grad_enabled():
        gb = torch.linalg.solve(a.mT, gx)
    else:
        gb = kernels.solve(a.mT.contiguous(), gx.contiguous())[0]
    return (-(gb @ x.mT) if needs[0] else None), (gb if needs[1] else None)


def vjp(fn, inputs, dy, needs):
    """The gradients of fn(*inputs) (PyTorch's own ops) for dy, themselves
    differentiable."""
    with torch.enable_grad():
        wrt = [t for t, n in zip(inputs, needs) if n]
        grads = iter(torch.autograd.grad(fn(*inputs), wrt, dy, create_graph=True, allow_unused=True))
    return tuple(next(grads) if n else None for n in needs)


def rms_norm(kernels, dy, x, weight, rstd, eps, needs, forms=None):
    """(dx, dweight) for the inputs (x, weight) that need them; forms: the
    forward's (its kernel call's)."""
    if torch.is_grad_enabled():
        return vjp(lambda x, w: torch_rms_norm(x, w, eps), (x, weight), dy, needs)
    return kernels.rms_norm_backward(dy, x, weight, rstd, weight is not None and needs[1], forms)


def layer_norm(kernels, dy, x, weight, bias, stats, eps, needs, forms=None):
    """stats: the forward's float32 [2 * rows], means then rstds; forms: the
    forward's."""
    if torch.is_grad_enabled():
        return vjp(lambda x, w, b: torch_layer_norm(x, x.shape[-1:], w, b, eps), (x, weight, bias), dy, needs)
    return kernels.layer_norm_backward(dy, x, weight, stats, weight is not None and needs[1],
                                       bias is not None and needs[2], forms)


def softmax(kernels, dy, y, x_dtype):
    """dx in x's dtype (y is float32 where the forward upcast: the kernel
    writes x's dtype, as PyTorch's backward of the upcast does)."""
    if torch.is_grad_enabled():  # in ops on y, which differentiate through the softmax again
        return (y * (dy - (dy * y).sum(-1, keepdim=True))).to(x_dtype)
    return kernels.softmax_backward(dy.to(y.dtype), y, x_dtype)


def gelu(kernels, dy, x, tanh_form):
    if torch.is_grad_enabled():
        approximate = "tanh" if tanh_form else "none"
        return vjp(lambda x: torch_gelu(x, approximate=approximate), (x,), dy, (True,))[0]
    return kernels.gelu_backward(dy, x, tanh_form)


def silu(kernels, dy, x):
    if torch.is_grad_enabled():
        return vjp(torch_silu, (x,), dy, (True,))[0]
    return kernels.silu_backward(dy, x)


# What each gated kind's activation is in PyTorch's ops
GLU_ACTS = {0: torch_silu, 1: torch_gelu, 2: lambda x: torch_gelu(x, approximate="tanh")}


def torch_glu(gate, up, kind):
    return GLU_ACTS[kind](gate) * up


def glu(kernels, dy, gate, up, kind):
    """(dgate, dup)."""
    if torch.is_grad_enabled():
        return vjp(lambda g, u: torch_glu(g, u, kind), (gate, up), dy, (True, True))
    return kernels.glu_backward(dy, gate, up, kind)



def rotate_half(x):
    x1, x2 = x.chunk(2, -1)
    return torch.cat((-x2, x1), -1)


def torch_rope(q, k, cos, sin):
    """Hugging Face's apply_rotary_pos_emb: cos and sin [B, T, D] over the
    heads of q and k [B, H, T, D]."""
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def rope(kernels, dy, cos, sin, strides=None):
    """The gradient of one rotated tensor: the transposed rotation of dy,
    laid out with strides (the forward input's layout; None: dy's)."""
    if torch.is_grad_enabled():  # [y1 c1 + y2 s2, y2 c2 - y1 s1] in PyTorch's ops
        c, s = cos.unsqueeze(1), sin.unsqueeze(1)
        d1, d2 = dy.chunk(2, -1)
        c1, c2 = c.chunk(2, -1)
        s1, s2 = s.chunk(2, -1)
        return torch.cat((d1 * c1 + d2 * s2, d2 * c2 - d1 * s1), -1)
    if dy.stride(-1) != 1:  # an expanded gradient (sum's) has stride 0: the kernel wants 1
        dy = dy.contiguous()
    return kernels.rope(dy, cos, sin, True, strides)
