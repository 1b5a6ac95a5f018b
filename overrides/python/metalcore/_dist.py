"""Layer 1: DTensor (torch.distributed's sharded tensor), where this
PyTorch has it: telling one apart, its local shard, and computing on each
shard."""
import torch

DTensor = Replicate = Shard = Partial = None
if torch.distributed.is_available():
    try:  # public from PyTorch 2.4 on
        from torch.distributed.tensor import DTensor, Partial, Replicate, Shard
    except ImportError:
        try:
            from torch.distributed._tensor import DTensor, Replicate, Shard
            from torch.distributed._tensor.placement_types import _Partial as Partial
        except ImportError:
            pass


def is_dtensor(t):
    return DTensor is not None and isinstance(t, DTensor)


def local(t):
    """A DTensor's local shard, else t (for the optimizer, under no_grad:
    the shard itself)."""
    return t.to_local() if is_dtensor(t) else t


def shard_refused(x, params, reduces_last):
    """Why a call on DTensor x (with weight and bias params) is not the
    local op on each shard, or None. That is exact where x is replicated or
    sharded on dimensions the op does not reduce over (any, for an
    elementwise op; never a pending partial sum), and the params are
    replicated DTensors on x's mesh."""
    last = x.dim() - 1
    for p in x.placements:
        if p.is_partial():
            return "DTensor holding a partial sum"
        if reduces_last and p.is_shard() and p.dim % x.dim() == last:
            return "DTensor sharded on the normalized dimension"
    for w in params:
        if w is not None and not (isinstance(w, DTensor) and w.device_mesh == x.device_mesh and
                                  all(p.is_replicate() for p in w.placements)):
            return "weight or bias not replicated on the input's mesh"
    return None


def on_shards(x, params, compute):
    """compute(x's local shard, made contiguous, and each param's) as a
    DTensor placed as x, differentiable: a param's gradient is a partial sum
    over the mesh dimensions x is sharded on (DTensor reduces it where it is
    needed)."""
    grads = [Partial() if p.is_shard() else Replicate() for p in x.placements]
    local_params = [None if w is None else w.to_local(grad_placements=grads) for w in params]
    y = compute(x.to_local().contiguous(), *local_params)
    return DTensor.from_local(y, x.device_mesh, x.placements, run_check=False, shape=x.shape,
                              stride=_contiguous_strides(x.shape))


def _contiguous_strides(shape):
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))
