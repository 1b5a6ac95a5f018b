"""Layer 2: the kernel calls, one function per library op: allocate the
outputs, describe the tensors, call the library on the tensor's queue.
Every path above (autograd Functions, custom ops, the optimizer) calls
these; none of them checks whether the library takes the input (that is
_lib.unsupported, asked by the caller)."""
import ctypes
import math

import torch

from . import _lib
from ._lib import CALLS, check, describe, described, fail, form, lib, run

_rmsnorm_fwd, _rmsnorm_bwd = lib.mc_rmsnorm_fwd, lib.mc_rmsnorm_bwd
_layernorm_fwd, _layernorm_bwd = lib.mc_layernorm_fwd, lib.mc_layernorm_bwd
_softmax_fwd, _softmax_bwd = lib.mc_softmax_fwd, lib.mc_softmax_bwd
_gelu_fwd, _gelu_bwd = lib.mc_gelu_fwd, lib.mc_gelu_bwd
_silu_fwd, _silu_bwd = lib.mc_silu_fwd, lib.mc_silu_bwd
_fused_add_fwd = lib.mc_fused_add_rmsnorm_fwd
_qr, _qr_workspace = lib.mc_qr, lib.mc_qr_workspace_size
_cholesky = lib.mc_cholesky
_solve = lib.mc_solve
_eigh = lib.mc_eigh
_svd = lib.mc_svd
_cross_entropy = lib.mc_cross_entropy
_cross_entropy_fwd, _cross_entropy_bwd = lib.mc_cross_entropy_fwd, lib.mc_cross_entropy_bwd
_loss_grad_scale = lib.mc_loss_grad_scale
_glu_fwd, _glu_bwd = lib.mc_glu_fwd, lib.mc_glu_bwd
_rope = lib.mc_rope


_workspace_bytes = {}  # (query, x's form or Forms, args) -> bytes: fixed by the shapes and the device


def _workspace(query, x, *args, forms=None):
    """The workspace the size query (an mc_*_workspace_size taking x, args,
    then the size's address) asks for, or None when it asks for none; asked
    once per form of x (forms: x's Forms, which name it)."""
    key = (query.__name__, forms if forms is not None else form(x)) + args
    n = _workspace_bytes.get(key)
    if n is None:
        size = ctypes.c_int64()
        CALLS[query.__name__[3:]] += 1
        check(query(describe(x), *args, ctypes.addressof(size)))
        if len(_workspace_bytes) >= 256:
            _workspace_bytes.clear()
        n = _workspace_bytes[key] = size.value
    return x.new_empty(n, dtype=torch.uint8) if n else None


def rows(x):
    """How many rows of its last dimension x has."""
    n = x.shape[-1]
    return x.numel() // n if n else math.prod(x.shape[:-1])


def _row_stats(x, per_row=1, forms=None):
    """float32 [per_row * rows] on x's device: an rstd per row, or
    LayerNorm's statistics (every row's mean, then every row's rstd); forms:
    x's (admit's), which keep a template of them: one float32 expanded to
    their shape (4 bytes kept), whose empty_like is a fresh contiguous
    tensor of that shape and costs half of torch.empty's keyword parsing."""
    if forms is None:
        return torch.empty(per_row * rows(x), dtype=torch.float32, device=x.device)
    key = ("row stats", per_row)  # the Forms' plans entry of the template
    template = forms.plans.get(key)
    if template is None:
        template = forms.plans[key] = torch.empty(1, dtype=torch.float32, device=x.device).expand(per_row * rows(x))
    return torch.empty_like(template)


# Each call's tensors are described through described(): the key names the
# library function (as CALLS does), the forms of the tensors given to it,
# and what fixes the shapes of those it makes. A call given forms (the
# Forms _lib.admit gave for its input tensors, in the order it takes them)
# keeps its plan in forms.plans, under the rest of that key, and calls the
# library function itself on forms.queue() (the eager path: run's frame and
# its questions to the tensor cost more than a microsecond on a slow host);
# the others go through run.

def rms_norm(x, weight, eps, want_rstd=True, forms=None):
    """(y, rstd); rstd None unless want_rstd."""
    y = torch.empty_like(x)
    rstd = _row_stats(x, 1, forms) if want_rstd else None
    CALLS["rmsnorm_fwd"] += 1
    tensors = (x, weight, y, rstd)
    if forms:
        a = described(("rmsnorm_fwd", want_rstd), tensors, None, forms.plans)
        status = _rmsnorm_fwd(a[0], a[1], eps, a[2], a[3], forms.queue())
        if status:
            fail(status)
    else:
        a = described(("rmsnorm_fwd", form(x), form(weight), want_rstd), tensors)
        run(_rmsnorm_fwd, x, a[0], a[1], eps, a[2], a[3])
    return y, rstd


# A norm's backward given its forward's Forms keys its plan (in this
# thread's table: the backward may run on another thread) by them: they fix
# every tensor's form, dy's too, which autograd hands over in the forward
# output's shape and dtype, made contiguous here.

def rms_norm_backward(dy, x, weight, rstd, want_dw, forms=None):
    """(dx, dweight); dweight None unless want_dw. forms: the forward's
    (the note above)."""
    dy = dy.contiguous()
    dx = torch.empty_like(x)
    dw = torch.empty_like(weight) if want_dw else None
    ws = _workspace(lib.mc_rmsnorm_bwd_workspace_size, x, forms=forms) if want_dw else None
    CALLS["rmsnorm_bwd"] += 1
    key = ("rmsnorm_bwd", forms, want_dw) if forms is not None else \
        ("rmsnorm_bwd", form(dy), form(x), form(weight), form(rstd), form(ws), want_dw)
    a = described(key, (dy, x, weight, rstd, dx, dw, ws))
    run(_rmsnorm_bwd, x, a[0], a[1], a[2], a[3], a[4], a[5], a[6])
    return dx, dw


_STATS_HALVES = {4: 0, 5: 1}


def layer_norm(x, weight, bias, eps, want_stats=True, forms=None):
    """(y, stats): stats float32 [2 * rows], every row's mean then every
    row's rstd (one allocation), or None unless want_stats."""
    y = torch.empty_like(x)
    stats = _row_stats(x, 2, forms) if want_stats else None
    CALLS["layernorm_fwd"] += 1
    tensors = (x, weight, bias, y, stats, stats)
    if forms:
        a = described(("layernorm_fwd", want_stats), tensors, _STATS_HALVES, forms.plans)
        status = _layernorm_fwd(a[0], a[1], a[2], eps, a[3], a[4], a[5], forms.queue())
        if status:
            fail(status)
    else:
        a = described(("layernorm_fwd", form(x), form(weight), form(bias), want_stats), tensors, _STATS_HALVES)
        run(_layernorm_fwd, x, a[0], a[1], a[2], eps, a[3], a[4], a[5])
    return y, stats


_BACKWARD_STATS_HALVES = {3: 0, 4: 1}


def layer_norm_backward(dy, x, weight, stats, want_dw, want_db, forms=None):
    """(dx, dweight, dbias); each gradient None unless wanted. forms: the
    forward's (the note above)."""
    dy = dy.contiguous()
    dx = torch.empty_like(x)
    dw = torch.empty_like(weight) if want_dw else None
    db = (torch.empty_like(weight) if weight is not None else x.new_empty(x.shape[-1])) if want_db else None
    ws = _workspace(lib.mc_layernorm_bwd_workspace_size, x, forms=forms) if (want_dw or want_db) else None
    CALLS["layernorm_bwd"] += 1
    key = ("layernorm_bwd", forms, want_dw, want_db) if forms is not None else \
        ("layernorm_bwd", form(dy), form(x), form(weight), form(stats), form(ws), want_dw, want_db)
    a = described(key, (dy, x, weight, stats, stats, dx, dw, db, ws), _BACKWARD_STATS_HALVES)
    run(_layernorm_bwd, x, a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8])
    return dx, dw, db


def softmax(x, upcast=False, forms=None):
    """softmax(x) in x's dtype, or float32 (upcast, for a 16-bit x)."""
    y = torch.empty_like(x, dtype=torch.float32) if upcast else torch.empty_like(x)
    CALLS["softmax_fwd"] += 1
    if forms:
        a = described(("softmax_fwd", upcast), (x, y), None, forms.plans)
        status = _softmax_fwd(a[0], a[1], forms.queue())
        if status:
            fail(status)
    else:
        a = described(("softmax_fwd", form(x), upcast), (x, y))
        run(_softmax_fwd, x, a[0], a[1])
    return y


def softmax_backward(dy, y, dtype=None):
    """dx of dtype: y's (None), or a 16-bit dtype for a float32 y (the
    upcasting forward's gradient, in its input's dtype)."""
    dy = dy.contiguous()
    dx = torch.empty_like(y) if dtype is None or dtype == y.dtype else torch.empty_like(y, dtype=dtype)
    CALLS["softmax_bwd"] += 1
    a = described(("softmax_bwd", form(dy), form(y), dx.dtype), (dy, y, dx))
    run(_softmax_bwd, y, a[0], a[1], a[2])
    return dx


def _unary(name, fn):
    """The kernel call y = f(x, *args, forms=None) of an elementwise library
    function fn(x, *args, y, queue) (named name in CALLS): a closure, which
    costs its callers no Python frame more than the call itself."""
    def call(x, *args, forms=None):
        CALLS[name] += 1
        y = torch.empty_like(x)
        if forms:
            a = described(name, (x, y), None, forms.plans)
            status = fn(a[0], *args, a[1], forms.queue())
            if status:
                fail(status)
        else:
            a = described((name, form(x)), (x, y))
            run(fn, x, a[0], *args, a[1])
        return y
    return call


def _unary_grad(name, fn):
    """The kernel call dx = f(dy, x, *args) of an elementwise backward
    fn(dy, x, *args, dx, queue)."""
    def call(dy, x, *args):
        CALLS[name] += 1
        dy = dy.contiguous()
        dx = torch.empty_like(x)
        a = described((name, form(dy), form(x)), (dy, x, dx))
        run(fn, x, a[0], a[1], *args, a[2])
        return dx
    return call


gelu, gelu_backward = _unary("gelu_fwd", _gelu_fwd), _unary_grad("gelu_bwd", _gelu_bwd)  # (x, tanh_form, forms=)
silu, silu_backward = _unary("silu_fwd", _silu_fwd), _unary_grad("silu_bwd", _silu_bwd)  # (x, forms=)


GLU_KINDS = {"swiglu": 0, "geglu": 1, "geglu_tanh": 2}


def glu(gate, up, kind):
    """act(gate) * up (kind: GLU_KINDS' code)."""
    y = torch.empty_like(gate)
    CALLS["glu_fwd"] += 1
    a = described(("glu_fwd", form(gate), form(up)), (gate, up, y))
    run(_glu_fwd, gate, a[0], a[1], kind, a[2])
    return y


def glu_backward(dy, gate, up, kind):
    """(dgate, dup)."""
    dy = dy.contiguous()
    dg, du = torch.empty_like(gate), torch.empty_like(up)
    CALLS["glu_bwd"] += 1
    a = described(("glu_bwd", form(dy), form(gate), form(up)), (dy, gate, up, dg, du))
    run(_glu_bwd, gate, a[0], a[1], a[2], kind, a[3], a[4])
    return dg, du


def rope(x, cos, sin, backward=False, strides=None):
    """x [B, H, T, D] (any strides with a unit last one) rotated by cos and
    sin [B or 1, T, D], or (backward) the rotation's transpose: a new tensor
    laid out as x (as torch.empty_like lays it out: a transposed view's
    layout kept, as PyTorch's elementwise ops keep it), with strides, or
    contiguous where strides is "contiguous"."""
    if strides is None:
        y = torch.empty_like(x)
    elif strides == "contiguous":
        y = x.new_empty(x.shape)
    else:
        y = x.new_empty_strided(x.shape, strides)
    CALLS["rope"] += 1
    a = described(("rope", form(x), form(cos), form(sin), strides), (x, cos, sin, y))  # y's layout: x's, or strides
    run(_rope, x, a[0], a[1], a[2], int(backward), a[3])
    return y


def fused_add_rms_norm(x, residual, weight, eps, forms=None):
    """(rms_norm(x + residual) * weight, x + residual)."""
    y, out = torch.empty_like(x), torch.empty_like(residual)
    CALLS["fused_add_rmsnorm_fwd"] += 1
    tensors = (x, residual, weight, y, out)
    if forms:
        a = described("fused_add_rmsnorm_fwd", tensors, None, forms.plans)
        status = _fused_add_fwd(a[0], a[1], a[2], eps, a[3], a[4], None, forms.queue())
        if status:
            fail(status)
    else:
        a = described(("fused_add_rmsnorm_fwd", form(x), form(residual), form(weight)), tensors)
        run(_fused_add_fwd, x, a[0], a[1], a[2], eps, a[3], a[4], None)
    return y, out


def cross_entropy(logits, target, ignore_index, smoothing, scale, grad=None):
    """Each row's float32 loss (a 1-D tensor), and where grad is given (a
    tensor like logits, or logits itself), the gradient of the loss times
    scale (a one-element float32 tensor on logits' device, or None: 1)
    written into it."""
    loss = logits.new_empty(rows(logits), dtype=torch.float32)
    CALLS["cross_entropy"] += 1
    a = described(("cross_entropy", form(logits), form(target), form(scale), form(grad)),
                  (logits, target, scale, loss, grad))
    run(_cross_entropy, logits, a[0], a[1], ignore_index, smoothing, a[2], a[3], a[4])
    return loss


def cross_entropy_forward(logits, target, ignore_index, smoothing):
    """(each row's float32 loss, each row's log-sum-exp for
    cross_entropy_backward), from one read of the logits."""
    loss, lse = (logits.new_empty(rows(logits), dtype=torch.float32) for _ in range(2))
    CALLS["cross_entropy_fwd"] += 1
    a = described(("cross_entropy_fwd", form(logits), form(target)), (logits, target, loss, lse))
    run(_cross_entropy_fwd, logits, a[0], a[1], ignore_index, smoothing, a[2], a[3])
    return loss, lse


def cross_entropy_backward(logits, target, lse, ignore_index, smoothing, scale):
    """The gradient of the loss rows (times scale: float32, one value or one
    a row) from cross_entropy_forward's lse: one read of the logits."""
    grad = torch.empty_like(logits)
    CALLS["cross_entropy_bwd"] += 1
    a = described(("cross_entropy_bwd", form(logits), form(target), form(lse), form(scale)),
                  (logits, target, lse, scale, grad))
    run(_cross_entropy_bwd, logits, a[0], a[1], a[2], ignore_index, smoothing, a[3], a[4])
    return grad


def scale_gradient(grad, scale):
    """grad *= scale (a one-element float32 tensor on grad's device, read
    there) in place; nothing is written where it is 1."""
    CALLS["loss_grad_scale"] += 1
    a = described(("loss_grad_scale", form(grad), form(scale)), (grad, scale))
    run(_loss_grad_scale, grad, a[0], a[1])


def linear_cross_entropy(hidden, weight, bias, target, ignore_index, smoothing, scale, chunk, want):
    """Each row's float32 loss of F.linear(hidden, weight, bias) against
    target, chunk rows at a time (PyTorch's matmul for the logits, one
    library call turning them into their gradient in place), and the
    gradients (dhidden, dweight, dbias) of the loss rows' sum times scale
    (a one-element float32 tensor, or None: 1), each where want (three
    booleans) asks for it, else None. The full logits never exist."""
    wanted = any(want)
    rows = hidden.new_empty(hidden.shape[0], dtype=torch.float32)
    dh = torch.empty_like(hidden) if want[0] else None
    dw = torch.zeros_like(weight) if want[1] else None
    db = torch.zeros_like(bias) if bias is not None and want[2] else None
    g = None
    for i in range(0, hidden.shape[0], chunk):
        h, t = hidden[i:i + chunk], target[i:i + chunk]
        del g  # the last chunk's logits go before this chunk's are made: one chunk at a time
        # the kernel reads 16-bit logits as float32, as .float() would make
        # them, and writes the gradient in their dtype, as autograd would
        # cast it back: in place, the chunk's logits become it
        g = torch.nn.functional.linear(h, weight, bias)
        rows[i:i + chunk] = cross_entropy(g, t, ignore_index, smoothing, scale, g if wanted else None)
        if not wanted:
            continue
        if dh is not None:
            torch.matmul(g, weight, out=dh[i:i + chunk])
        if dw is not None:
            dw.addmm_(g.t(), h)
        if db is not None:
            db.add_(g.sum(0))
    return rows, dh, dw, db


# ---- Cholesky -----------------------------------------------------------------------------

def cholesky(a, upper):
    """(the Cholesky factor of every matrix of a [..., n, n] (contiguous),
    info int32 [...]: 0, or the order of the first leading minor that is not
    positive-definite)."""
    l, info = torch.empty_like(a), a.new_empty(a.shape[:-2], dtype=torch.int32)
    CALLS["cholesky"] += 1
    args = described(("cholesky", form(a)), (a, l, info))
    run(_cholesky, a, args[0], int(upper), args[1], args[2])
    return l, info


def solve(a, b):
    """(x, info) for every system A X = B of a [..., n, n] and b [..., n, k]
    (contiguous, one batch shape): x shaped as b, info int32 [...] (0, or
    the index + 1 of the first zero pivot, where x is NaN)."""
    x, info = torch.empty_like(b), a.new_empty(a.shape[:-2], dtype=torch.int32)
    CALLS["solve"] += 1
    args = described(("solve", form(a), form(b)), (a, b, x, info))
    run(_solve, a, args[0], args[1], args[2], args[3])
    return x, info


# ---- QR ---------------------------------------------------------------------------------

QR_MODES = {"reduced": 0, "complete": 1, "r": 2}


def eigh(a, upper, vectors=True):
    """(w, v, info) of a contiguous [..., n, n], reading its lower
    triangle (upper: its upper one): the eigenvalues ascending and the
    eigenvectors in columns, in a's dtype; v None unless vectors; info
    (int32) 0, or 1 where a matrix was not finite or did not converge."""
    w = a.new_empty(a.shape[:-1])
    v = torch.empty_like(a) if vectors else None
    info = a.new_empty(a.shape[:-2], dtype=torch.int32)
    CALLS["eigh"] += 1
    d = described(("eigh", form(a), vectors), (a, w, v, info))
    run(_eigh, a, d[0], int(upper), d[1], d[2], d[3])
    return w, v, info


def svd_outputs(a, vectors):
    """svd's outputs for a [..., m, n], unwritten (also the custom op's fake
    results): u [..., m, k] and vh [..., k, n] (None unless vectors), s
    [..., k] in a's dtype, info [...] int32."""
    batch, (m, n) = a.shape[:-2], a.shape[-2:]
    k = min(m, n)
    u, vh = (a.new_empty(*batch, m, k), a.new_empty(*batch, k, n)) if vectors else (None, None)
    return u, a.new_empty(*batch, k), vh, a.new_empty(batch, dtype=torch.int32)


def svd(a, vectors=True):
    """(u, s, vh, info) of a contiguous [..., m, n], thin (k = min(m, n)):
    s descending, u and vh None unless vectors (svd_outputs); info 0, or 1
    where a matrix was not finite or did not converge."""
    u, s, vh, info = svd_outputs(a, vectors)
    CALLS["svd"] += 1
    d = described(("svd", form(a), vectors), (a, u, s, vh, info))
    run(_svd, a, d[0], d[1], d[2], d[3], d[4])
    return u, s, vh, info


def qr_shapes(a, mode):
    """((q rows, q cols), (r rows, r cols)) of each matrix; q is 0 x 0 in
    mode 'r' (torch.linalg.qr's empty Q)."""
    m, n = a.shape[-2:]
    k = min(m, n)
    if mode == "r":
        return (0, 0), (k, n)
    if mode == "complete":
        return (m, m), (m, n)
    return (m, k), (k, n)


def qr(a, mode):
    """(q, r) from the library; q empty in mode 'r'."""
    (qm, qc), (rr, n) = qr_shapes(a, mode)
    batch, code = a.shape[:-2], QR_MODES[mode]
    r = a.new_empty(batch + (rr, n))
    q = a.new_empty(batch + (qm, qc)) if mode != "r" else None
    ws = _workspace(_qr_workspace, a, code)
    CALLS["qr"] += 1
    d = described(("qr", form(a), code, form(ws)), (a, q, r, ws))
    run(_qr, a, d[0], code, d[1], d[2], d[3])
    return (q if q is not None else a.new_empty(0)), r


# ---- AdamW ------------------------------------------------------------------------------

class AdamWConfig(ctypes.Structure):
    """mc_adamw_config."""
    _fields_ = [("lr", ctypes.c_double), ("beta1", ctypes.c_double), ("beta2", ctypes.c_double),
                ("eps", ctypes.c_double), ("weight_decay", ctypes.c_double), ("step", ctypes.c_int64),
                ("amsgrad", ctypes.c_int32), ("maximize", ctypes.c_int32)]


class TensorTable:
    """The descriptors of a list of tensors side by side, and the array of
    their addresses (an mc_tensor* const*), kept between calls: a step
    rewrites only what changed (set, or set_data for a tensor of the same
    shape, dtype, device and layout as the one described: tensor i's data
    pointer is words[i * SLOT_WORDS])."""

    def __init__(self, tensors):
        n = len(tensors)
        self.buffer = ctypes.create_string_buffer(max(n, 1) * _lib.SLOT_BYTES)
        self.words = memoryview(self.buffer).cast("B").cast("Q")
        base = ctypes.addressof(self.buffer)
        self.addresses = [base + i * _lib.SLOT_BYTES for i in range(n)]
        self.pointers = (ctypes.c_void_p * max(n, 1))(*self.addresses)
        self.address = ctypes.addressof(self.pointers)
        for i, t in enumerate(tensors):
            self.set(i, t)

    def set(self, i, t):
        _lib.pack_into(self.buffer, i * _lib.SLOT_BYTES, self.addresses[i], t)

    def set_data(self, i, data):
        self.words[i * _lib.SLOT_WORDS] = data


def adamw_step(tables, n, config, grad_scale, found_inf, on):
    """One library call stepping the n tensors of tables (params, grads,
    exp_avgs, exp_avg_sqs, max_exp_avg_sqs or None: TensorTables) with
    config (an AdamWConfig), dividing the gradients by grad_scale and
    skipping everything where found_inf is set (one-element float32 tensors
    on the tensors' device, or None); on is a tensor of that device."""
    CALLS["adamw_step_scaled"] += 1
    run(lib.mc_adamw_step_scaled, on, ctypes.addressof(config), n, *_addresses(tables),
        describe(grad_scale, 0), describe(found_inf, 1))


def adamw_step_capturable(tables, n, config, grad_scale, found_inf, steps, lr, on):
    """adamw_step reading each tensor's step number (steps, float32 [n]) and
    optionally the lr (a one-element float32 tensor) on the device."""
    CALLS["adamw_step_capturable"] += 1
    run(lib.mc_adamw_step_capturable, on, ctypes.addressof(config), n, *_addresses(tables),
        describe(grad_scale, 0), describe(found_inf, 1), describe(steps, 2), describe(lr, 3))


def _addresses(tables):
    return [None if t is None else t.address for t in tables]
