"""Layer 4: metalcore.optim.AdamW, torch.optim.AdamW with one library call
per parameter group and device (and step count) per step, float32 state
always. The tensor tables a call takes are built once per parameter set and
kept: a step rewrites only the gradients' addresses. With capturable=True
the step counts (and a tensor lr) live on the device, so that a step can be
captured in a CUDA graph."""
import math

import torch

from . import _kernels, _lib, _ops
from ._dist import is_dtensor, local
from ._lib import PLAIN, SLOT_WORDS, unsupported


def _state_dtype(p):
    """float32 state, complex64 for a complex parameter (stepped as its
    float32 view_as_real, as PyTorch steps complex parameters)."""
    return torch.complex64 if p.is_complex() else torch.float32


def _real(t):
    """What the library steps for t: a DTensor's local shard (AdamW is
    elementwise, so any placement steps exactly), a complex tensor's real
    view."""
    t = local(t)
    return torch.view_as_real(t) if t.is_complex() else t


def _grad(p):
    """p's gradient; a DTensor one laid out as p is (a gradient of
    another placement, a Partial sum say, is redistributed first)."""
    g = p.grad
    if is_dtensor(g) and is_dtensor(p) and g.placements != p.placements:
        g = g.redistribute(p.device_mesh, p.placements)
    return g


def _float32_step(count):
    """count + 1 as PyTorch's float32 step tensor holds it after += 1."""
    return float(torch.tensor(count, dtype=torch.float32).add_(1)) if count >= 2 ** 24 else count + 1


# The library's step number is an int64; from 2^63 on beta ** step is 0 in
# double for every beta < 1, as it already is at 2^63 - 1.
_MAX_STEP = 2 ** 63 - 1


def _hyper_refused(group):
    """Why this group's hyper-parameters go to PyTorch's arithmetic (an lr
    below 0, which a schedule may reach and PyTorch steps with), or None.
    Raises, before anything is stepped, where the library refuses them
    (NaN or infinite values, betas outside [0, 1), eps or weight_decay
    below 0) or where they are not numbers."""
    beta1, beta2 = (float(b) for b in group["betas"])
    lr = group["lr"]
    lr = 0.0 if isinstance(lr, torch.Tensor) else float(lr)
    eps, wd = float(group["eps"]), float(group["weight_decay"])
    for name, value, ok in (("learning rate", lr, True), ("beta parameter at index 0", beta1, 0 <= beta1 < 1),
                            ("beta parameter at index 1", beta2, 0 <= beta2 < 1), ("epsilon", eps, eps >= 0),
                            ("weight_decay", wd, wd >= 0)):
        if not ok or not math.isfinite(value):
            raise _lib.MetalcoreError(f"metalcore.optim.AdamW: invalid {name} value: {value}; nothing was stepped", 1)
    return "negative lr" if lr < 0 else None


class _Batch:
    """The tensors of one library call (one group, device and step count):
    lists of params, grads and float32 states (real views of complex ones),
    and, once built, the TensorTables the call takes."""

    def __init__(self, device, count):
        self.device = device
        self.count = count  # the step count, on the host (None: capturable, on the device)
        self.owners = []  # the parameters whose .grad each row reads
        self.rows = []  # [param, grad, exp_avg, exp_avg_sq(, max_exp_avg_sq)]
        self.states = []  # each row's optimizer state
        self.steps = []  # the state's step tensors
        self.counter = None  # once shared: the tensor the steps are views of
        self.in_flight = ()  # what the last capturable step reached by address (kept until the next)
        self.tables = None

    def share_steps(self):
        """Makes the batch's step counts 0-d views of one float32 tensor (on
        the host, or the device where capturable), so that a step advances
        them all in one op, where a foreach add over host scalars costs
        about 2 us a tensor; each state keeps its own step tensor."""
        self.counter = torch.stack(self.steps)
        self.steps = list(self.counter.unbind(0))
        for state, view in zip(self.states, self.steps):
            state["step"] = view
        self.counted = self.counter._version

    def counts_changed(self):
        """Whether a step count was changed, or replaced, other than by a step."""
        return self.counter._version != self.counted or any(
            state["step"] is not view for state, view in zip(self.states, self.steps))

    def build_tables(self):
        cols = list(zip(*self.rows))
        self.tables = [_kernels.TensorTable(c) for c in cols[:4]]
        self.tables.append(_kernels.TensorTable(cols[4]) if len(cols) > 4 else None)
        self.share_steps()
        # what take_grads and current compare against: the batch shares one
        # dtype and device; each row its shape, complex flag and data
        first = self.rows[0][0]
        self.dtype, self.device_index, self.element_size = first.dtype, first.get_device(), first.element_size()
        self.mps = first.is_mps  # an MPS tensor's data is a buffer and an offset: described whole
        self.shapes = [row[0].shape for row in self.rows]
        self.complex = [p.is_complex() for p in self.owners]
        self.data = [local(p).data_ptr() for p in self.owners]
        # plain: every parameter a plain real tensor off MPS (take_grads' quick path)
        self.plain = not self.mps and all(type(p) in PLAIN and not c for p, c in zip(self.owners, self.complex))

    def take_grads(self):
        """Reads each parameter's gradient into the grads table; False when
        a parameter's data is no longer where it was described, or a
        gradient no longer matches the description (the plan is then made
        again)."""
        if self.plain:
            return self._take_plain_grads()
        table, rows = self.tables[1], self.rows
        dtype, index, size, plain = self.dtype, self.device_index, self.element_size, torch.Tensor
        for i, (p, shape, cplx) in enumerate(zip(self.owners, self.shapes, self.complex)):
            if p.grad is None or local(p).data_ptr() != self.data[i]:
                return False
            g = local(_grad(p))
            if cplx:
                g = torch.view_as_real(g)
            data = g.data_ptr()
            if (type(g) is not plain or g.dtype != dtype or g.shape != shape or g.get_device() != index or
                    not g.is_contiguous() or data % size):
                return False
            rows[i][1] = g
            if self.mps:
                table.set(i, g)
            else:
                table.set_data(i, data)
        return True

    def _take_plain_grads(self, group_params=None):
        """take_grads for a plain batch, the same checks (a gradient's .data
        can be swapped for a tensor of another dtype, device or shape)
        without the DTensor, complex and MPS cases, writing each data pointer
        straight into the table. group_params: the group's parameters, for a
        batch that holds all of them in their order: each is checked to be
        the one described (what the plan's key checks otherwise), in the
        same loop."""
        rows, words, stride = self.rows, self.tables[1].words, SLOT_WORDS
        dtype, index, size, plain = self.dtype, self.device_index, self.element_size, torch.Tensor
        owners, whole = self.owners, group_params is not None
        if whole and len(group_params) != len(owners):
            return False
        for i, (p, d, shape) in enumerate(zip(group_params if whole else owners, self.data, self.shapes)):
            if whole and p is not owners[i]:
                return False
            g = p.grad
            if (type(g) is not plain or p.data_ptr() != d or g.dtype is not dtype or g.shape != shape or
                    g.get_device() != index or not g.is_contiguous()):
                return False
            data = g.data_ptr()
            if data % size:
                return False
            rows[i][1] = g
            words[i * stride] = data
        return True


class _Plan:
    """A group's step, kept between steps: the library batches by (device,
    step count) and the rows stepped with PyTorch's arithmetic, for one set
    of parameters with gradients."""

    def __init__(self, optimizer, group):
        self.params = [p for p in group["params"] if p.grad is not None]
        self.key = [id(p) for p in self.params]
        capturable = group.get("capturable", False)
        self.refused = _hyper_refused(group)
        self.batches, self.rest = {}, []  # rest: (param, why, state, row) stepped with PyTorch's arithmetic
        for p in self.params:
            if p.grad.is_sparse:
                raise RuntimeError("AdamW does not support sparse gradients")
            if p.grad.shape != p.shape:
                raise RuntimeError(f"AdamW: a gradient of shape {list(p.grad.shape)} for a parameter of shape "
                                   f"{list(p.shape)}")
            state = optimizer._state(p, group["amsgrad"], capturable)
            row = [_real(p), _real(_grad(p)), _real(state["exp_avg"]), _real(state["exp_avg_sq"])]
            if group["amsgrad"]:
                row.append(_real(state["max_exp_avg_sq"]))
            why = self.refused or unsupported(row[0], row[1])
            if why is None and not all(t.is_contiguous() and t.device == row[0].device for t in row[2:]):
                why = "state not contiguous on the parameter's device"
            if why == _lib.MISALIGNED:
                raise _lib.MetalcoreError("metalcore.optim.AdamW: a parameter or gradient whose data is not aligned "
                                          "to its elements; nothing was stepped", 1)
            if why is not None:
                self.rest.append((p, why, state, row))
                continue
            count, device = None if capturable else float(state["step"]), row[0].device
            batch = self.batches.get((device, count))
            if batch is None:
                batch = self.batches[(device, count)] = _Batch(device, count)
            batch.owners.append(p)
            batch.rows.append(row)
            batch.states.append(state)
            batch.steps.append(state["step"])
        # the one batch that holds every parameter of the group, in its order
        # (each with a gradient, none stepped with PyTorch's arithmetic)
        self.whole = next(iter(self.batches.values())) if (
            len(self.batches) == 1 and not self.rest and len(self.params) == len(group["params"])) else None

    def current(self, group):
        """Whether this plan still describes the group: the same parameters
        with gradients, their data where it was, no step count changed
        elsewhere, and every gradient as described."""
        whole = self.whole
        if whole is not None and whole.tables is not None and whole.plain:  # the key checked in the grads' loop
            return (_hyper_refused(group) == self.refused and not whole.counts_changed() and
                    whole._take_plain_grads(group["params"]))
        params = [p for p in group["params"] if p.grad is not None]
        if [id(p) for p in params] != self.key or _hyper_refused(group) != self.refused:
            return False
        for batch in self.batches.values():
            if batch.tables is None or batch.counts_changed() or not batch.take_grads():
                return False
        return True


class AdamW(torch.optim.Optimizer):
    """torch.optim.AdamW's algorithm and arguments (decoupled weight decay,
    amsgrad, maximize); lr and the other hyper-parameters are read at every
    step, so schedulers work. Parameters metalcore does not take (float64,
    non-contiguous, a device without a backend), and groups whose
    hyper-parameters the library refuses (a negative lr from a schedule),
    are stepped with PyTorch's arithmetic, with the same float32 state.
    Complex parameters are stepped as their real views, DTensor parameters
    (FSDP2, tensor parallel) on their local shards, whatever their meshes
    and placements, with DTensor state placed as the parameter. capturable=True
    keeps each step count as a float32 tensor on its parameter's device
    (PyTorch's layout) and lets lr be a tensor: step() then never waits for
    the device, and can be captured in a CUDA graph.

    GradScaler: the optimizer unscales and skips inside its step, as
    PyTorch's fused AdamW does (PyTorch 2's GradScaler sets grad_scale and
    found_inf on it around step(); PyTorch 1.13's passes itself as
    step(grad_scaler=...))."""

    _step_supports_amp_scaling = True

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
        self._plans = {}

    def _state(self, p, amsgrad, capturable=False):
        state = self.state[p]
        if not state:
            dtype = _state_dtype(p)
            state["step"] = torch.zeros((), dtype=torch.float32, device=p.device if capturable else None)
            state["exp_avg"] = torch.zeros_like(p, dtype=dtype, memory_format=torch.contiguous_format)
            state["exp_avg_sq"] = torch.zeros_like(p, dtype=dtype, memory_format=torch.contiguous_format)
        if amsgrad and "max_exp_avg_sq" not in state:
            state["max_exp_avg_sq"] = torch.zeros_like(state["exp_avg_sq"])
        if capturable and state["step"].device != p.device:
            state["step"] = state["step"].to(device=p.device, dtype=torch.float32)
        return state

    def __setstate__(self, state):
        """Unpickling and deepcopy (torch.optim.Optimizer pickles defaults,
        state and groups): the plans are made again."""
        super().__setstate__(state)
        self._plans = {}

    def add_param_group(self, param_group):
        super().add_param_group(param_group)
        self.__dict__.setdefault("_plans", {}).clear()

    def load_state_dict(self, state_dict):
        """torch.optim.Optimizer.load_state_dict (from metalcore's AdamW or
        PyTorch's), with the moments kept float32 (complex64): PyTorch casts
        them to each parameter's dtype, which a 16-bit parameter's state
        must not become."""
        super().load_state_dict(state_dict)
        self._plans.clear()
        saved_ids = [i for g in state_dict["param_groups"] for i in g["params"]]
        params = [p for g in self.param_groups for p in g["params"]]
        for pid, p in zip(saved_ids, params):
            saved = state_dict["state"].get(pid, {})
            for k in ("exp_avg", "exp_avg_sq", "max_exp_avg_sq"):
                if k in saved:
                    self.state[p][k] = saved[k].to(device=p.device, dtype=_state_dtype(p),
                                                   memory_format=torch.contiguous_format, copy=True)

    def _scaling(self, grad_scaler):
        """(grad_scale, found_inf) of the GradScaler stepping this optimizer,
        as one-element float32 tensors, or None."""
        if grad_scaler is None:  # PyTorch 2's GradScaler sets these around step()
            return getattr(self, "grad_scale", None), getattr(self, "found_inf", None)
        # PyTorch 1.13's passes itself: what PyTorch 2's would have set
        state = grad_scaler._per_optimizer_states[id(self)]
        if state["stage"].name == "READY":
            grad_scaler._check_inf_per_device(self)
        scale = grad_scaler._get_scale_async()
        found = [t.to(scale.device, non_blocking=True) for t in state["found_inf_per_device"].values()]
        return (None if state["stage"].name == "UNSCALED" else scale), (sum(found) if found else None)

    def _plan(self, index, group):
        plan = self._plans.get(index)
        if plan is None or not plan.current(group):
            plan = self._plans[index] = _Plan(self, group)
        return plan

    @torch.no_grad()
    def step(self, closure=None, **scaler):
        """One step. Every check comes before anything is written, so a step
        that raises leaves parameters, state and step counts as they were."""
        grad_scaler = scaler.pop("grad_scaler", None)
        if scaler:
            raise TypeError(f"AdamW.step() got unexpected keyword arguments {sorted(scaler)}")
        grad_scale, found_inf = self._scaling(grad_scaler)
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        compiled = _ops.compiling()
        plans = []
        for i, group in enumerate(self.param_groups):
            plan = _Plan(self, group) if compiled else self._plan(i, group)
            for batch in plan.batches.values():
                if not compiled and batch.tables is None:
                    batch.build_tables()
                    batch.take_grads()
            plans.append((group, plan))
        # an inf or NaN gradient: no parameter, moment or step count changes; groups
        # that count steps on the host read found_inf there, capturable ones never
        skip_host = (found_inf is not None and not all(g.get("capturable", False) for g in self.param_groups) and
                     float(found_inf) != 0)
        for group, plan in plans:
            self._run(group, plan, grad_scale, found_inf, skip_host, compiled)
        return loss

    def _run(self, group, plan, grad_scale, found_inf, skip_host, compiled):
        capturable = group.get("capturable", False)
        for batch in plan.batches.values():
            scale, inf = (None if t is None else t.to(device=batch.device, dtype=torch.float32).reshape(1)
                          for t in (grad_scale, found_inf))
            if capturable:
                self._capturable_step(group, batch, scale, inf, compiled)
            elif not skip_host:
                count = _float32_step(batch.count)
                self._library_step(group, batch, min(int(count), _MAX_STEP), scale, inf, compiled)
                if batch.counter is None:
                    torch._foreach_add_(batch.steps, 1)
                else:
                    batch.counter.add_(1)
                batch.count = count
            if batch.counter is not None:
                batch.counted = batch.counter._version
        if skip_host and not capturable:
            return
        for p, why, state, row in plan.rest:
            _lib.fell_back("adamw", why)
            row[1] = _real(_grad(p))
            state_step = state["step"]
            state_step += 1
            _torch_step(group, state_step if capturable else float(state_step), *row, grad_scale=grad_scale,
                        found_inf=found_inf if capturable else None)
            if capturable and found_inf is not None:
                state_step -= found_inf.to(state_step.device).reshape(())

    def _config(self, group, lr, step):
        beta1, beta2 = group["betas"]
        return _kernels.AdamWConfig(lr, beta1, beta2, group["eps"], group["weight_decay"], step,
                                    bool(group["amsgrad"]), bool(group["maximize"]))

    def _library_step(self, group, batch, step, scale, inf, compiled):
        if compiled:
            cols = [list(c) for c in zip(*batch.rows)]
            beta1, beta2 = group["betas"]
            torch.ops.metalcore.adamw_step(*cols[:4], cols[4] if len(cols) > 4 else [], scale, inf,
                                           float(group["lr"]), beta1, beta2, group["eps"], group["weight_decay"],
                                           step, bool(group["amsgrad"]), bool(group["maximize"]))
            return
        _kernels.adamw_step(batch.tables, len(batch.rows), self._config(group, float(group["lr"]), step), scale, inf,
                            batch.rows[0][0])

    def _capturable_step(self, group, batch, scale, inf, compiled):
        """Steps every tensor of the batch, each reading its step number (its
        count plus one) on the device, then advances the counts, except where
        found_inf is set (as PyTorch's fused step does): nothing waits for the
        device."""
        lr = group["lr"]
        lr_tensor = (lr.to(device=batch.device, dtype=torch.float32).reshape(1) if isinstance(lr, torch.Tensor)
                     else None)
        lr_value = 0.0 if lr_tensor is not None else float(lr)
        if batch.counter is None:
            steps = torch.stack(batch.steps).add_(1)
        else:  # the counts themselves, advanced before the step reads them as PyTorch's fused step does
            steps = batch.counter.add_(1)
        if compiled:
            cols = [list(c) for c in zip(*batch.rows)]
            beta1, beta2 = group["betas"]
            torch.ops.metalcore.adamw_step_capturable(
                *cols[:4], cols[4] if len(cols) > 4 else [], scale, inf, lr_value, beta1, beta2, group["eps"],
                group["weight_decay"], steps, lr_tensor, bool(group["amsgrad"]), bool(group["maximize"]))
        else:
            _kernels.adamw_step_capturable(batch.tables, len(batch.rows), self._config(group, lr_value, 1), scale,
                                           inf, steps, lr_tensor, batch.rows[0][0])
        # the kernel reaches these through their device addresses alone (Metal's
        # tables): they stay referenced until the batch's next step, not just
        # this call, so no buffer of theirs is freed or reused under work
        # still queued
        batch.in_flight = (steps, lr_tensor, scale, inf)
        if batch.counter is not None:
            if inf is not None:
                batch.counter.sub_(inf)
            return
        torch._foreach_add_(batch.steps, 1)
        if inf is not None:
            torch._foreach_sub_(batch.steps, [inf.reshape(())] * len(batch.steps))


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
