"""metalcore.optim.AdamW: torch.optim.AdamW with one library call per
parameter group (and device and step count) per step, float32 state always;
with capturable=True, one call per group and device with the step counts (and
a tensor lr) on the device, so that a step can be captured in a CUDA graph."""
import ctypes

import torch

from . import _lib, _ops
from ._ops import unsupported


class _Config(ctypes.Structure):
    _fields_ = [("lr", ctypes.c_double), ("beta1", ctypes.c_double), ("beta2", ctypes.c_double),
                ("eps", ctypes.c_double), ("weight_decay", ctypes.c_double), ("step", ctypes.c_int64),
                ("amsgrad", ctypes.c_int32), ("maximize", ctypes.c_int32)]


def _pointers(tensors):
    """A C array of mc_tensor pointers (kept alive by the array)."""
    descs = [_lib.describe(t)._obj for t in tensors]
    arr = (ctypes.POINTER(_lib.Tensor) * len(descs))(*[ctypes.pointer(d) for d in descs])
    arr._keep = descs
    return arr


class AdamW(torch.optim.Optimizer):
    """torch.optim.AdamW's algorithm and arguments (decoupled weight decay,
    amsgrad, maximize); lr and the other hyper-parameters are read at every
    step, so schedulers work. Parameters metalcore does not take (float64,
    non-contiguous, a device without a backend) are stepped with PyTorch's
    arithmetic, with the same float32 state. capturable=True keeps each step
    count as a float32 tensor on its parameter's device (PyTorch's layout) and
    lets lr be a tensor: step() then never waits for the device, and can be
    captured in a CUDA graph."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False, *,
                 maximize=False, foreach=None, capturable=False, differentiable=False, fused=None):
        # foreach and fused are PyTorch's choice of implementation: metalcore
        # steps a whole group in one fused call whatever they say.
        if differentiable:
            raise ValueError("metalcore.optim.AdamW: differentiable=True (a step autograd can differentiate "
                             "through) is not supported; use torch.optim.AdamW for it")
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if not 0.0 <= betas[0] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 0: {betas[0]}")
        if not 0.0 <= betas[1] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 1: {betas[1]}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if isinstance(lr, torch.Tensor) and not capturable:
            raise ValueError("metalcore.optim.AdamW: a tensor lr needs capturable=True")
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
                                      maximize=maximize, capturable=capturable))

    def _state(self, p, amsgrad, capturable=False):
        state = self.state[p]
        if not state:
            state["step"] = torch.zeros((), dtype=torch.float32, device=p.device if capturable else None)
            state["exp_avg"] = torch.zeros_like(p, dtype=torch.float32, memory_format=torch.contiguous_format)
            state["exp_avg_sq"] = torch.zeros_like(p, dtype=torch.float32, memory_format=torch.contiguous_format)
        if amsgrad and "max_exp_avg_sq" not in state:
            state["max_exp_avg_sq"] = torch.zeros_like(state["exp_avg_sq"])
        return state

    def load_state_dict(self, state_dict):
        """torch.optim.Optimizer.load_state_dict (from metalcore's AdamW or
        PyTorch's), with the moments kept float32: PyTorch casts them to each
        parameter's dtype, which a 16-bit parameter's state must not become."""
        super().load_state_dict(state_dict)
        saved_ids = [i for g in state_dict["param_groups"] for i in g["params"]]
        params = [p for g in self.param_groups for p in g["params"]]
        for pid, p in zip(saved_ids, params):
            saved = state_dict["state"].get(pid, {})
            for k in ("exp_avg", "exp_avg_sq", "max_exp_avg_sq"):
                if k in saved:
                    self.state[p][k] = saved[k].to(device=p.device, dtype=torch.float32,
                                                   memory_format=torch.contiguous_format, copy=True)

    # torch.amp.GradScaler hands grad_scale and found_inf to step() instead
    # of unscaling the gradients itself, as with PyTorch's fused AdamW
    _step_supports_amp_scaling = True

    @torch.no_grad()
    def step(self, closure=None, grad_scale=None, found_inf=None):
        """One step. The library's calls come first and all-or-nothing: a
        step the library refuses raises with nothing updated, step counts
        included. grad_scale and found_inf (GradScaler's, one-element float32
        tensors): the gradients are divided by grad_scale, and where found_inf
        is nonzero nothing is stepped (the kernels read both on the device;
        the step counts need found_inf's value on the host)."""
        from . import _overrides  # its fallback counts (imported after this module)
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        # an inf or NaN gradient: no parameter, moment or step count changes; groups
        # that count steps on the host read found_inf there, capturable ones never
        capturable = [g.get("capturable", False) for g in self.param_groups]
        skip_host = found_inf is not None and not all(capturable) and float(found_inf) != 0
        if skip_host and not any(capturable):
            return loss
        work = []  # (group, library batches, params PyTorch's arithmetic steps)
        for group in self.param_groups:
            amsgrad, capturable = group["amsgrad"], group.get("capturable", False)
            batches, rest = {}, []  # batches: (device, step) -> lists for one library call
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("AdamW does not support sparse gradients")
                state = self._state(p, amsgrad, capturable)
                if capturable and state["step"].device != p.device:
                    state["step"] = state["step"].to(device=p.device, dtype=torch.float32)
                # capturable: one call per device, each tensor's step read there; else the host's count
                step = None if capturable else int(state["step"].item()) + 1
                tensors = [p, p.grad, state["exp_avg"], state["exp_avg_sq"]]
                if amsgrad:
                    tensors.append(state["max_exp_avg_sq"])
                why = unsupported(p, p.grad)
                if why is None and not all(t.is_contiguous() and t.device == p.device for t in tensors[2:]):
                    why = "state not contiguous on the parameter's device"
                if why is None:
                    batches.setdefault((p.device, step), []).append(tensors)
                else:
                    _overrides._fell_back("adamw", why)
                    rest.append((step, tensors))
            work.append((group, batches, rest))
        for group, batches, _ in work:
            for (device, step), items in batches.items():
                steps = [self.state[tensors[0]]["step"] for tensors in items]
                if step is None:
                    self._capturable_step(group, steps, items, device, grad_scale, found_inf)
                    continue
                if skip_host:
                    continue
                self._library_step(group, step, items, device, grad_scale, found_inf)
                torch._foreach_add_(steps, 1)
        for group, _, rest in work:
            for step, tensors in rest:
                if step is not None and skip_host:
                    continue
                state_step = self.state[tensors[0]]["step"]
                state_step += 1
                _torch_step(group, state_step if step is None else step, *tensors, grad_scale=grad_scale,
                            found_inf=found_inf if step is None else None)
                if step is None and found_inf is not None:
                    state_step -= found_inf.to(state_step.device).reshape(())
        return loss

    def _capturable_step(self, group, steps, items, device, grad_scale, found_inf):
        """Steps every tensor of items, each reading its step number (its
        count plus one) on the device, then advances the counts, except where
        found_inf is set (as PyTorch's fused step does): nothing waits for the
        device, and a refused call changes nothing."""
        lr = group["lr"]
        lr_tensor = lr.to(device=device, dtype=torch.float32).reshape(1) if isinstance(lr, torch.Tensor) else None
        args = _call_args(group, items, device, grad_scale, found_inf, 0.0 if lr_tensor is not None else lr)
        args += (torch.stack(steps).add_(1), lr_tensor, bool(group["amsgrad"]), bool(group["maximize"]))
        if _ops.CUSTOM_OPS:
            torch.ops.metalcore.adamw_step_capturable(*args[:4], args[4] or [], *args[5:])
        else:
            adamw_capturable_kernel(*args)
        torch._foreach_add_(steps, 1)
        found_inf = args[6]  # on the device, float32
        if found_inf is not None:
            torch._foreach_sub_(steps, [found_inf.reshape(())] * len(steps))

    def _library_step(self, group, step, items, device, grad_scale, found_inf):
        args = _call_args(group, items, device, grad_scale, found_inf, group["lr"])
        args += (step, bool(group["amsgrad"]), bool(group["maximize"]))
        if _ops.CUSTOM_OPS:
            torch.ops.metalcore.adamw_step(*args[:4], args[4] or [], *args[5:])
        else:
            adamw_kernel(*args)


def _call_args(group, items, device, grad_scale, found_inf, lr):
    """What every library step takes first: the tensor lists of items (max
    None without amsgrad), grad_scale and found_inf as one-element float32
    tensors on device (or None), then lr, the betas, eps and weight decay."""
    cols = [list(c) for c in zip(*items)]
    beta1, beta2 = group["betas"]
    grad_scale, found_inf = (None if t is None else t.to(device=device, dtype=torch.float32).reshape(1)
                             for t in (grad_scale, found_inf))
    return (cols[0], cols[1], cols[2], cols[3], cols[4] if len(cols) > 4 else None, grad_scale, found_inf,
            float(lr), float(beta1), float(beta2), float(group["eps"]), float(group["weight_decay"]))


def _lists(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs):
    """The C arrays of a step's tensor lists (max_exp_avg_sqs NULL when None)."""
    lists = [_pointers(c) for c in (params, grads, exp_avgs, exp_avg_sqs)]
    return lists + [_pointers(max_exp_avg_sqs) if max_exp_avg_sqs is not None else None]


def adamw_kernel(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, grad_scale, found_inf, lr, beta1, beta2,
                 eps, weight_decay, step, amsgrad, maximize):
    """One library call stepping every tensor of the lists (all on one device)."""
    cfg = _Config(lr, beta1, beta2, eps, weight_decay, step, int(amsgrad), int(maximize))
    _lib.check(_lib.lib.mc_adamw_step_scaled(ctypes.byref(cfg), ctypes.c_int64(len(params)),
                                             *_lists(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs),
                                             _lib.describe(grad_scale), _lib.describe(found_inf),
                                             _lib.encoder(params[0])))


def adamw_capturable_kernel(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, grad_scale, found_inf, lr,
                            beta1, beta2, eps, weight_decay, steps, lr_tensor, amsgrad, maximize):
    """adamw_kernel with every tensor's step number (steps) and optionally lr
    read on the device."""
    cfg = _Config(lr, beta1, beta2, eps, weight_decay, 1, int(amsgrad), int(maximize))
    _lib.check(_lib.lib.mc_adamw_step_capturable(ctypes.byref(cfg), ctypes.c_int64(len(params)),
                                                 *_lists(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs),
                                                 _lib.describe(grad_scale), _lib.describe(found_inf),
                                                 _lib.describe(steps), _lib.describe(lr_tensor),
                                                 _lib.encoder(params[0])))


def _torch_step(group, step, p, grad, exp_avg, exp_avg_sq, max_exp_avg_sq=None, grad_scale=None, found_inf=None):
    """torch.optim.AdamW's single-tensor step, in float32 for 16-bit params.
    step is the host's count, or (capturable) a tensor on p's device: then,
    as in PyTorch's capturable arithmetic, nothing is read on the host (lr
    may be a tensor too), and found_inf selects the old values instead of
    returning early."""
    beta1, beta2 = group["betas"]
    lr, eps, wd = group["lr"], group["eps"], group["weight_decay"]
    on_device = isinstance(step, torch.Tensor)
    state = [t for t in (p, exp_avg, exp_avg_sq, max_exp_avg_sq) if t is not None]
    saved = [t.clone() for t in state] if on_device and found_inf is not None else None
    g = grad.to(exp_avg.dtype)
    if grad_scale is not None:
        g = g / grad_scale.to(g.device)
    if group["maximize"]:
        g = -g
    work = p.to(exp_avg.dtype) if p.dtype in (torch.float16, torch.bfloat16) else p
    work.mul_(1 - lr * wd)
    exp_avg.lerp_(g, 1 - beta1)
    exp_avg_sq.mul_(beta2).addcmul_(g, g, value=1 - beta2)
    v = torch.maximum(max_exp_avg_sq, exp_avg_sq, out=max_exp_avg_sq) if max_exp_avg_sq is not None else exp_avg_sq
    if on_device:
        bc1, bc2 = 1 - torch.pow(beta1, step), 1 - torch.pow(beta2, step)
        work.sub_(exp_avg / (v.sqrt() / bc2.sqrt()).add_(eps) * (lr / bc1))
    else:
        bc1, bc2 = 1 - beta1 ** step, 1 - beta2 ** step
        work.addcdiv_(exp_avg, (v.sqrt() / bc2 ** 0.5).add_(eps), value=-lr / bc1)
    if work is not p:
        p.copy_(work)
    if saved is not None:
        keep = found_inf.to(p.device).reshape(()) != 0
        for t, old in zip(state, saved):
            t.copy_(torch.where(keep, old, t))
