"""Layer 3: metalcore's ops registered with torch.library (PyTorch 2.4 and
later): torch.ops.metalcore.*, each with a fake (shape) implementation and,
where PyTorch's op is differentiable, an autograd formula. They are the path
under torch.compile and for opcheck (eager calls take _autograd's
Functions). The implementations are _kernels' calls; the CUDA stream is
read there, where torch.compile never traces."""
from typing import List, Optional, Tuple

import torch

from . import _backward, _kernels

Tensor = torch.Tensor


def _none_as_empty(t, like):
    """Custom ops return tensors only: an absent gradient travels as an empty
    tensor (and back to None in the autograd formula)."""
    return like.new_empty(0) if t is None else t


def _empty_as_none(t, wanted):
    return t if wanted else None


# ---- forward ops ------------------------------------------------------------------

@torch.library.custom_op("metalcore::rms_norm", mutates_args=())
def rms_norm(x: Tensor, weight: Optional[Tensor], eps: float) -> Tuple[Tensor, Tensor]:
    return _kernels.rms_norm(x, weight, eps)


@rms_norm.register_fake
def _(x, weight, eps):
    return torch.empty_like(x), x.new_empty(_kernels.rows(x), dtype=torch.float32)


@torch.library.custom_op("metalcore::layer_norm", mutates_args=())
def layer_norm(x: Tensor, weight: Optional[Tensor], bias: Optional[Tensor], eps: float) -> Tuple[Tensor, Tensor]:
    """(y, stats): stats float32 [2 * rows], every row's mean then every row's rstd."""
    return _kernels.layer_norm(x, weight, bias, eps)


@layer_norm.register_fake
def _(x, weight, bias, eps):
    return torch.empty_like(x), x.new_empty(2 * _kernels.rows(x), dtype=torch.float32)


@torch.library.custom_op("metalcore::softmax", mutates_args=())
def softmax(x: Tensor, upcast: bool) -> Tensor:
    return _kernels.softmax(x, upcast)


@torch.library.custom_op("metalcore::gelu", mutates_args=())
def gelu(x: Tensor, tanh_form: bool) -> Tensor:
    return _kernels.gelu(x, tanh_form)


@torch.library.custom_op("metalcore::silu", mutates_args=())
def silu(x: Tensor) -> Tensor:
    return _kernels.silu(x)


@torch.library.custom_op("metalcore::fused_add_rms_norm", mutates_args=())
def fused_add_rms_norm(x: Tensor, residual: Tensor, weight: Optional[Tensor], eps: float) -> Tuple[Tensor, Tensor]:
    return _kernels.fused_add_rms_norm(x, residual, weight, eps)


@fused_add_rms_norm.register_fake
def _(x, residual, weight, eps):
    return torch.empty_like(x), torch.empty_like(residual)


@torch.library.custom_op("metalcore::glu", mutates_args=())
def glu(gate: Tensor, up: Tensor, kind: int) -> Tensor:
    return _kernels.glu(gate, up, kind)


@torch.library.custom_op("metalcore::rope", mutates_args=())
def rope(x: Tensor, cos: Tensor, sin: Tensor, backward: bool) -> Tensor:
    """x rotated (or, backward, by the rotation's transpose): contiguous
    (a custom op's output layout is fixed by its fake, whatever layout
    torch.compile hands it its input in)."""
    return _kernels.rope(x, cos, sin, backward, "contiguous")


@torch.library.custom_op("metalcore::cross_entropy", mutates_args=())
def cross_entropy(logits: Tensor, target: Tensor, ignore_index: int, smoothing: float) -> Tuple[Tensor, Tensor]:
    """(each row's float32 loss, each row's log-sum-exp for the backward)
    (logits [N, V], int64 target [N])."""
    return _kernels.cross_entropy_forward(logits, target, ignore_index, smoothing)


softmax.register_fake(lambda x, upcast: torch.empty_like(x, dtype=torch.float32 if upcast else x.dtype))
cross_entropy.register_fake(lambda logits, target, ignore_index, smoothing: tuple(
    logits.new_empty(_kernels.rows(logits), dtype=torch.float32) for _ in range(2)))
silu.register_fake(lambda x: torch.empty_like(x))
gelu.register_fake(lambda x, tanh_form: torch.empty_like(x))
glu.register_fake(lambda gate, up, kind: torch.empty_like(gate))
rope.register_fake(lambda x, cos, sin, backward: x.new_empty(x.shape))


# ---- backward ops -------------------------------------------------------------------

@torch.library.custom_op("metalcore::rms_norm_backward", mutates_args=())
def rms_norm_backward(dy: Tensor, x: Tensor, weight: Optional[Tensor], rstd: Tensor,
                      want_dw: bool) -> Tuple[Tensor, Tensor]:
    dx, dw = _kernels.rms_norm_backward(dy, x, weight, rstd, want_dw)
    return dx, _none_as_empty(dw, x)


@rms_norm_backward.register_fake
def _(dy, x, weight, rstd, want_dw):
    return torch.empty_like(x), torch.empty_like(weight) if want_dw else x.new_empty(0)


@torch.library.custom_op("metalcore::layer_norm_backward", mutates_args=())
def layer_norm_backward(dy: Tensor, x: Tensor, weight: Optional[Tensor], stats: Tensor, want_dw: bool,
                        want_db: bool) -> Tuple[Tensor, Tensor, Tensor]:
    dx, dw, db = _kernels.layer_norm_backward(dy, x, weight, stats, want_dw, want_db)
    return dx, _none_as_empty(dw, x), _none_as_empty(db, x)


@layer_norm_backward.register_fake
def _(dy, x, weight, stats, want_dw, want_db):
    cols = x.new_empty(x.shape[-1:])
    return torch.empty_like(x), cols if want_dw else x.new_empty(0), torch.empty_like(cols) if want_db else x.new_empty(0)


@torch.library.custom_op("metalcore::softmax_backward", mutates_args=())
def softmax_backward(dy: Tensor, y: Tensor, dtype: torch.dtype) -> Tensor:
    return _kernels.softmax_backward(dy, y, dtype)


@torch.library.custom_op("metalcore::gelu_backward", mutates_args=())
def gelu_backward(dy: Tensor, x: Tensor, tanh_form: bool) -> Tensor:
    return _kernels.gelu_backward(dy, x, tanh_form)


@torch.library.custom_op("metalcore::silu_backward", mutates_args=())
def silu_backward(dy: Tensor, x: Tensor) -> Tensor:
    return _kernels.silu_backward(dy, x)


@torch.library.custom_op("metalcore::glu_backward", mutates_args=())
def glu_backward(dy: Tensor, gate: Tensor, up: Tensor, kind: int) -> Tuple[Tensor, Tensor]:
    return _kernels.glu_backward(dy, gate, up, kind)


@torch.library.custom_op("metalcore::cross_entropy_backward", mutates_args=())
def cross_entropy_backward(logits: Tensor, target: Tensor, lse: Tensor, ignore_index: int, smoothing: float,
                           scale: Tensor) -> Tensor:
    """The gradient of each row's loss times scale (float32, one a row or
    one), from the forward's log-sum-exp."""
    return _kernels.cross_entropy_backward(logits, target, lse, ignore_index, smoothing, scale)


softmax_backward.register_fake(lambda dy, y, dtype: torch.empty_like(y, dtype=dtype))
cross_entropy_backward.register_fake(lambda logits, target, lse, ignore_index, smoothing, scale:
                                     torch.empty_like(logits))
glu_backward.register_fake(lambda dy, gate, up, kind: (torch.empty_like(gate), torch.empty_like(up)))
gelu_backward.register_fake(lambda dy, x, tanh_form: torch.empty_like(x))
silu_backward.register_fake(lambda dy, x: torch.empty_like(x))


class _Backward:
    """The backward kernels as _backward calls them, here the backward ops."""

    @staticmethod
    def rms_norm_backward(dy, x, weight, rstd, want_dw, forms=None):
        dx, dw = rms_norm_backward(dy.contiguous(), x, weight, rstd, want_dw)
        return dx, _empty_as_none(dw, want_dw)

    @staticmethod
    def layer_norm_backward(dy, x, weight, stats, want_dw, want_db, forms=None):
        dx, dw, db = layer_norm_backward(dy.contiguous(), x, weight, stats, want_dw, want_db)
        return dx, _empty_as_none(dw, want_dw), _empty_as_none(db, want_db)

    @staticmethod
    def softmax_backward(dy, y, dtype):
        return softmax_backward(dy.contiguous(), y, dtype)

    @staticmethod
    def solve(a, b):
        return tuple(solve(a, b))  # the custom op below

    @staticmethod
    def gelu_backward(dy, x, tanh_form):
        return gelu_backward(dy.contiguous(), x, tanh_form)

    @staticmethod
    def silu_backward(dy, x):
        return silu_backward(dy.contiguous(), x)

    @staticmethod
    def glu_backward(dy, gate, up, kind):
        return glu_backward(dy.contiguous(), gate, up, kind)

    @staticmethod
    def rope(dy, cos, sin, backward, strides=None):
        return rope(dy, cos, sin, backward)  # contiguous, as its fake


_BACKWARD = _Backward()


# ---- autograd formulas ------------------------------------------------------------

def _rms_norm_context(ctx, inputs, output):
    x, weight, eps = inputs
    ctx.save_for_backward(x, weight, output[1])
    ctx.eps = eps


def _rms_norm_grad(ctx, dy, _drstd):
    x, weight, rstd = ctx.saved_tensors
    return _backward.rms_norm(_BACKWARD, dy, x, weight, rstd, ctx.eps, ctx.needs_input_grad[:2]) + (None,)


def _layer_norm_context(ctx, inputs, output):
    x, weight, bias, eps = inputs
    ctx.save_for_backward(x, weight, bias, output[1])
    ctx.eps = eps


def _layer_norm_grad(ctx, dy, _dstats):
    x, weight, bias, stats = ctx.saved_tensors
    return _backward.layer_norm(_BACKWARD, dy, x, weight, bias, stats, ctx.eps, ctx.needs_input_grad[:3]) + (None,)


def _softmax_context(ctx, inputs, output):
    ctx.save_for_backward(output)
    ctx.x_dtype = inputs[0].dtype


def _softmax_grad(ctx, dy):
    (y,) = ctx.saved_tensors
    return _backward.softmax(_BACKWARD, dy, y, ctx.x_dtype), None


def _gelu_context(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])
    ctx.tanh_form = inputs[1]


def _gelu_grad(ctx, dy):
    (x,) = ctx.saved_tensors
    return _backward.gelu(_BACKWARD, dy, x, ctx.tanh_form), None


def _silu_context(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])


def _silu_grad(ctx, dy):
    (x,) = ctx.saved_tensors
    return _backward.silu(_BACKWARD, dy, x)


def _glu_context(ctx, inputs, output):
    ctx.save_for_backward(inputs[0], inputs[1])
    ctx.kind = inputs[2]


def _glu_grad(ctx, dy):
    gate, up = ctx.saved_tensors
    return _backward.glu(_BACKWARD, dy, gate, up, ctx.kind) + (None,)


def _rope_context(ctx, inputs, output):
    ctx.save_for_backward(inputs[1], inputs[2])
    ctx.backward = inputs[3]


def _rope_grad(ctx, dy):
    cos, sin = ctx.saved_tensors
    if ctx.backward:  # the transpose's own transpose: the rotation
        return rope(dy.contiguous(), cos, sin, False), None, None, None
    return _backward.rope(_BACKWARD, dy, cos, sin), None, None, None


def _cross_entropy_context(ctx, inputs, output):
    ctx.save_for_backward(inputs[0], inputs[1], output[1])
    ctx.args = inputs[2:]


def _cross_entropy_grad(ctx, drows, _):
    logits, target, lse = ctx.saved_tensors
    return cross_entropy_backward(logits, target, lse, *ctx.args, drows.float().contiguous()), None, None, None


rms_norm.register_autograd(_rms_norm_grad, setup_context=_rms_norm_context)
cross_entropy.register_autograd(_cross_entropy_grad, setup_context=_cross_entropy_context)
glu.register_autograd(_glu_grad, setup_context=_glu_context)
rope.register_autograd(_rope_grad, setup_context=_rope_context)
layer_norm.register_autograd(_layer_norm_grad, setup_context=_layer_norm_context)
softmax.register_autograd(_softmax_grad, setup_context=_softmax_context)
gelu.register_autograd(_gelu_grad, setup_context=_gelu_context)
silu.register_autograd(_silu_grad, setup_context=_silu_context)


@torch.library.custom_op("metalcore::linear_cross_entropy", mutates_args=())
def linear_cross_entropy(hidden: Tensor, weight: Tensor, bias: Optional[Tensor], target: Tensor, ignore_index: int,
                         smoothing: float, mean: bool, chunk: int, want_dh: bool, want_dw: bool,
                         want_db: bool) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """(the loss rows' sum, or mean over the rows not ignored; dhidden,
    dweight, dbias of it, empty where not wanted), all made in the forward."""
    count = (target != ignore_index).sum()
    scale = (1 / count.float()).reshape(1) if mean else None
    rows, dh, dw, db = _kernels.linear_cross_entropy(hidden, weight, bias, target, ignore_index, smoothing, scale, chunk,
                                                     (want_dh, want_dw, want_db))
    loss = rows.sum() / count if mean else rows.sum()
    return loss, _none_as_empty(dh, hidden), _none_as_empty(dw, hidden), _none_as_empty(db, hidden)


@linear_cross_entropy.register_fake
def _(hidden, weight, bias, target, ignore_index, smoothing, mean, chunk, want_dh, want_dw, want_db):
    return (hidden.new_empty((), dtype=torch.float32), torch.empty_like(hidden) if want_dh else hidden.new_empty(0),
            torch.empty_like(weight) if want_dw else hidden.new_empty(0),
            torch.empty_like(bias) if want_db else hidden.new_empty(0))


def _linear_cross_entropy_context(ctx, inputs, output):
    ctx.save_for_backward(*output[1:])
    ctx.wants = inputs[8:]


def _linear_cross_entropy_grad(ctx, dloss, *_):
    grads = [g * dloss.to(g.dtype) if wanted else None for g, wanted in zip(ctx.saved_tensors, ctx.wants)]
    return (*grads, None, None, None, None, None, None, None, None)


linear_cross_entropy.register_autograd(_linear_cross_entropy_grad, setup_context=_linear_cross_entropy_context)


# ---- QR and AdamW -------------------------------------------------------------------

@torch.library.custom_op("metalcore::cholesky", mutates_args=())
def cholesky(a: Tensor, upper: bool) -> Tuple[Tensor, Tensor]:
    return _kernels.cholesky(a, upper)


cholesky.register_fake(lambda a, upper: (torch.empty_like(a), a.new_empty(a.shape[:-2], dtype=torch.int32)))


def _cholesky_context(ctx, inputs, output):
    ctx.save_for_backward(output[0])
    ctx.upper = inputs[1]


def _cholesky_grad(ctx, gl, _):
    return _backward.cholesky(ctx.saved_tensors[0], gl, ctx.upper), None


cholesky.register_autograd(_cholesky_grad, setup_context=_cholesky_context)


@torch.library.custom_op("metalcore::eigh", mutates_args=())
def eigh(a: Tensor, upper: bool, vectors: bool) -> Tuple[Tensor, Tensor, Tensor]:
    w, v, info = _kernels.eigh(a, upper, vectors)
    return w, (v if vectors else a.new_empty(0)), info


eigh.register_fake(lambda a, upper, vectors: (a.new_empty(a.shape[:-1]), torch.empty_like(a) if vectors else
                                              a.new_empty(0), a.new_empty(a.shape[:-2], dtype=torch.int32)))


def _eigh_context(ctx, inputs, output):
    ctx.save_for_backward(output[0], output[1])


def _eigh_grad(ctx, gw, gv, _):
    w, v = ctx.saved_tensors
    return _backward.eigh(gw, gv if v.numel() else None, w, v), None, None


eigh.register_autograd(_eigh_grad, setup_context=_eigh_context)


def _svd_results(a, u, s, vh, info):
    """(u, s, vh, info) as metalcore::svd returns them: an empty tensor for
    u and vh where they were not wanted (None)."""
    return (a.new_empty(0) if u is None else u), s, (a.new_empty(0) if vh is None else vh), info


@torch.library.custom_op("metalcore::svd", mutates_args=())
def svd(a: Tensor, vectors: bool) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    return _svd_results(a, *_kernels.svd(a, vectors))


svd.register_fake(lambda a, vectors: _svd_results(a, *_kernels.svd_outputs(a, vectors)))


def _svd_context(ctx, inputs, output):
    ctx.save_for_backward(output[0], output[1], output[2])
    ctx.vectors = inputs[1]


def _svd_grad(ctx, gu, gs, gvh, _):
    if not ctx.vectors:  # the values alone, called where no gradient was wanted
        return None, None
    return _backward.svd(gu, gs, gvh, *ctx.saved_tensors), None


svd.register_autograd(_svd_grad, setup_context=_svd_context)


@torch.library.custom_op("metalcore::solve", mutates_args=())
def solve(a: Tensor, b: Tensor) -> Tuple[Tensor, Tensor]:
    return _kernels.solve(a, b)


solve.register_fake(lambda a, b: (torch.empty_like(b), a.new_empty(a.shape[:-2], dtype=torch.int32)))


def _solve_context(ctx, inputs, output):
    ctx.save_for_backward(inputs[0], output[0])


def _solve_grad(ctx, gx, _):
    a, x = ctx.saved_tensors
    return _backward.solve(_BACKWARD, a, x, gx, ctx.needs_input_grad)


solve.register_autograd(_solve_grad, setup_context=_solve_context)


@torch.library.custom_op("metalcore::qr", mutates_args=())
def qr(a: Tensor, mode: str) -> Tuple[Tensor, Tensor]:
    return _kernels.qr(a, mode)


@qr.register_fake
def _(a, mode):
    (q_rows, q_cols), (r_rows, r_cols) = _kernels.qr_shapes(a, mode)
    batch = a.shape[:-2]
    q = a.new_empty(0) if mode == "r" else a.new_empty(*batch, q_rows, q_cols)
    return q, a.new_empty(*batch, r_rows, r_cols)


def _tables(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs):
    """The TensorTables of a step's lists (max_exp_avg_sqs: empty without
    amsgrad, since a schema has no optional lists)."""
    lists = (params, grads, exp_avgs, exp_avg_sqs)
    return [_kernels.TensorTable(t) for t in lists] + [_kernels.TensorTable(max_exp_avg_sqs) if max_exp_avg_sqs
                                                        else None]


@torch.library.custom_op("metalcore::adamw_step",
                         mutates_args=("params", "exp_avgs", "exp_avg_sqs", "max_exp_avg_sqs"))
def adamw_step(params: List[Tensor], grads: List[Tensor], exp_avgs: List[Tensor], exp_avg_sqs: List[Tensor],
               max_exp_avg_sqs: List[Tensor], grad_scale: Optional[Tensor], found_inf: Optional[Tensor], lr: float,
               beta1: float, beta2: float, eps: float, weight_decay: float, step: int, amsgrad: bool,
               maximize: bool) -> None:
    config = _kernels.AdamWConfig(lr, beta1, beta2, eps, weight_decay, step, amsgrad, maximize)
    _kernels.adamw_step(_tables(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs), len(params), config,
                        grad_scale, found_inf, params[0])


@adamw_step.register_fake
def _(*args):
    return None


@torch.library.custom_op("metalcore::adamw_step_capturable",
                         mutates_args=("params", "exp_avgs", "exp_avg_sqs", "max_exp_avg_sqs"))
def adamw_step_capturable(params: List[Tensor], grads: List[Tensor], exp_avgs: List[Tensor],
                          exp_avg_sqs: List[Tensor], max_exp_avg_sqs: List[Tensor], grad_scale: Optional[Tensor],
                          found_inf: Optional[Tensor], lr: float, beta1: float, beta2: float, eps: float,
                          weight_decay: float, steps: Tensor, lr_tensor: Optional[Tensor], amsgrad: bool,
                          maximize: bool) -> None:
    config = _kernels.AdamWConfig(lr, beta1, beta2, eps, weight_decay, 1, amsgrad, maximize)
    _kernels.adamw_step_capturable(_tables(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs), len(params),
                                   config, grad_scale, found_inf, steps, lr_tensor, params[0])


@adamw_step_capturable.register_fake
def _(*args):
    return None
