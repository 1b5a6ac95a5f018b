"""One process of the two-process checks on gloo (test_distributed.py):
python3 dist_worker.py RANK WORLD PORT OUTDIR. Each check returns None
when it holds, else what went wrong; the answers go to OUTDIR/RANK.json.
Spawned as plain processes, not by torchrun (whose rendezvous needs libuv,
which Debian's PyTorch lacks)."""
import json
import os
import sys
import traceback

import torch
import torch.distributed as dist
import torch.nn.functional as F

import metalcore
from metalcore._dist import DTensor, Replicate, Shard

try:
    from torch.distributed.fsdp import fully_shard
except ImportError:  # before 2.6
    from torch.distributed._composable.fsdp import fully_shard

STEPS, LR, WD = 3, 1e-2, 0.1

# FSDP2 on CPU in PyTorch 2.6 asks the CPU stream for events (fixed later)
if not hasattr(torch.cpu.Stream, "record_event"):
    torch.cpu.Stream.record_event = lambda self, event=None: None
    torch.cpu.Stream.wait_event = lambda self, event: None


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), metalcore.nn.RMSNorm(32, eps=1e-6), metalcore.nn.SiLU(),
                               torch.nn.LayerNorm(32), torch.nn.Linear(32, 8))


def batch(step):
    g = torch.Generator().manual_seed(100 + step)
    return torch.randn(8, 16, generator=g), torch.randn(8, 8, generator=g)


def train(m, opt, rank, world, steps=STEPS, first=0):
    """Steps on this rank's rows of each global batch (the gradient averaged
    over ranks is the whole batch's)."""
    rows = 8 // world
    for s in range(first, first + steps):
        x, y = batch(s)
        F.mse_loss(m(x[rank * rows:(rank + 1) * rows]), y[rank * rows:(rank + 1) * rows]).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)


def reference(steps=STEPS):
    """One process, the whole batch, PyTorch's AdamW."""
    m = model()
    train(m, torch.optim.AdamW(m.parameters(), lr=LR, weight_decay=WD), 0, 1, steps)
    return m


def full(t):
    return t.full_tensor() if isinstance(t, DTensor) else t


def differ(got, want, atol=2e-5):
    """What differs between two models' parameters (as full tensors), or None."""
    for (name, p), q in zip(got.named_parameters(), want.parameters()):
        err = (full(p.detach()) - full(q.detach())).abs().max().item()
        if err > atol:
            return f"{name} differs by {err:.3g}"
    return None


def sharded():
    """The model under FSDP2 on the CPU (a mesh named so: where CUDA is
    present, fully_shard's default mesh is on the GPU)."""
    m, mesh = model(), torch.distributed.device_mesh.init_device_mesh("cpu", (dist.get_world_size(),))
    for layer in (m[0], m[4]):
        fully_shard(layer, mesh=mesh, reshard_after_forward=False)
    fully_shard(m, mesh=mesh, reshard_after_forward=False)
    return m


def check_fsdp2(rank, world, tmp):
    """FSDP2 stepped by metalcore's kernel on every local shard equals one
    process with PyTorch's AdamW, and FSDP2 with PyTorch's AdamW; its state
    stays sharded like the parameters."""
    m = sharded()
    opt = metalcore.optim.AdamW(m.parameters(), lr=LR, weight_decay=WD)
    metalcore.reset_call_counts()
    metalcore.reset_fallback_counts()
    train(m, opt, rank, world)
    calls, fell = metalcore.call_counts().get("adamw_step_scaled", 0), metalcore.fallback_counts().get("adamw")
    if calls != STEPS or fell:
        return f"the kernel stepped {calls} times in {STEPS} steps; fallbacks {fell}"
    for p in m.parameters():
        if not isinstance(p, DTensor):
            return "a parameter is not a DTensor"
        st = opt.state[p]
        if not (isinstance(st["exp_avg"], DTensor) and st["exp_avg"].placements == p.placements and
                st["exp_avg"].to_local().dtype == torch.float32):
            return f"exp_avg is {type(st['exp_avg']).__name__}, not a float32 DTensor placed as its parameter"
    theirs = sharded()
    train(theirs, torch.optim.AdamW(theirs.parameters(), lr=LR, weight_decay=WD), rank, world)
    return differ(m, reference()) or differ(m, theirs)


def check_checkpoint(rank, world, tmp):
    """A sharded checkpoint (torch.distributed.checkpoint) of model and
    optimizer, loaded into a fresh model and metalcore AdamW, steps on
    exactly as the original does."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    m = sharded()
    opt = metalcore.optim.AdamW(m.parameters(), lr=LR, weight_decay=WD)
    train(m, opt, rank, world)
    msd, osd = get_state_dict(m, opt)
    states = [v for s in osd["state"].values() for k, v in s.items() if k.startswith("exp_avg")]
    if not states or not all(isinstance(v, DTensor) for v in states):
        return "the optimizer's state_dict is not sharded (DTensor moments)"
    path = os.path.join(tmp, "checkpoint")
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=path)
    m2 = sharded()
    opt2 = metalcore.optim.AdamW(m2.parameters(), lr=LR, weight_decay=WD)
    msd2, osd2 = get_state_dict(m2, opt2)
    dcp.load({"model": msd2, "optim": osd2}, checkpoint_id=path)
    set_state_dict(m2, opt2, model_state_dict=msd2, optim_state_dict=osd2)
    train(m, opt, rank, world, 2, STEPS)
    train(m2, opt2, rank, world, 2, STEPS)
    return differ(m2, m, atol=0)


def check_ddp(rank, world, tmp):
    """DDP stepped by metalcore's AdamW equals one process with PyTorch's."""
    m = torch.nn.parallel.DistributedDataParallel(model())
    train(m, metalcore.optim.AdamW(m.parameters(), lr=LR, weight_decay=WD), rank, world)
    return differ(m.module, reference())


def check_sharded_inputs(rank, world, tmp):
    """Norms, softmax and activations on DTensor inputs equal the unsharded
    result, forward and backward: sharded on rows or replicated, computed
    on the local shard by the library; sharded on the normalized dimension,
    PyTorch's op (counted). The modules likewise, their parameters
    replicated DTensors."""
    mesh = torch.distributed.device_mesh.init_device_mesh("cpu", (world,))
    torch.manual_seed(1)
    x, w, b, dy = torch.randn(4, 6, 8), torch.randn(8), torch.randn(8), torch.randn(4, 6, 8)
    ops = {
        "rms_norm": (lambda t, w_, b_: metalcore.rms_norm(t, w_, 1e-6), True),
        "layer_norm": (lambda t, w_, b_: metalcore.layer_norm(t, w_, b_), True),
        "softmax": (lambda t, w_, b_: metalcore.softmax(t), False),
        "silu": (lambda t, w_, b_: metalcore.silu(t), False),
        "gelu": (lambda t, w_, b_: metalcore.gelu(t, "tanh"), False),
    }
    for name, (op, weighted) in ops.items():
        want_x, want_w, want_b = (t.clone().requires_grad_() for t in (x, w, b))
        want = op(want_x, want_w, want_b)
        want.backward(dy)
        for placement, local in ((Shard(0), True), (Shard(1), True), (Replicate(), True), (Shard(2), False)):
            metalcore.reset_call_counts()
            metalcore.reset_fallback_counts()
            xd = DTensor.from_local(x.chunk(world, placement.dim)[rank] if isinstance(placement, Shard) else x,
                                    mesh, [placement]).detach().requires_grad_()
            wd, bd = (DTensor.from_local(t, mesh, [Replicate()]).detach().requires_grad_() for t in (w, b))
            got = op(xd, wd, bd)
            got.backward(DTensor.from_local(dy, mesh, [Replicate()]).redistribute(mesh, [placement]))
            err = max((full(got) - want).abs().max().item(), (full(xd.grad) - want_x.grad).abs().max().item())
            if weighted:
                err = max(err, (full(wd.grad) - want_w.grad).abs().max().item())
                if name == "layer_norm":
                    err = max(err, (full(bd.grad) - want_b.grad).abs().max().item())
            ours = local or name in ("silu", "gelu")  # else PyTorch's op, which places its result itself
            if not isinstance(got, DTensor) or (ours and got.placements != (placement,)) or err > 1e-4:
                return f"{name} on {placement}: {type(got).__name__} {getattr(got, 'placements', '')}, error {err:.3g}"
            ran = sum(metalcore.call_counts().values()) > 0
            fell = sum(metalcore.fallback_counts().get(name, {}).values())
            if ran != ours or fell != (not ours):
                return f"{name} on {placement}: the library {'ran' if ran else 'did not run'}"
    for make in (lambda: metalcore.nn.RMSNorm(8, eps=1e-6), lambda: metalcore.nn.LayerNorm(8), metalcore.nn.SiLU,
                 lambda: metalcore.nn.GELU("tanh"), lambda: metalcore.nn.Softmax(-1)):
        plain, dist_module = make(), make()
        for name, p in plain.named_parameters():
            setattr(dist_module, name, torch.nn.Parameter(DTensor.from_local(p.detach().clone(), mesh, [Replicate()])))
        metalcore.reset_call_counts()
        got = dist_module(DTensor.from_local(x.chunk(world, 1)[rank], mesh, [Shard(1)]))
        err = (full(got) - plain(x)).abs().max().item()
        if err > 1e-5 or got.placements != (Shard(1),) or not metalcore.call_counts():
            return f"{type(plain).__name__} on a sharded input: {got.placements}, error {err:.3g}"
    return None


CHECKS = {name[6:]: fn for name, fn in sorted(globals().items()) if name.startswith("check_")}


def run_checks(checks, rank, world, out):
    """Runs each check (name -> check(rank, world, out)) on this rank, in
    step with the others, writes the answers to out/RANK.json and ends the
    process (destroy_process_group can hang on gloo: a barrier is the end)."""
    results = {}
    for name, check in checks.items():
        try:
            results[name] = check(rank, world, out)
        except Exception:
            results[name] = traceback.format_exc()
        dist.barrier()
    with open(os.path.join(out, f"{rank}.json"), "w") as f:
        json.dump(results, f)
    dist.barrier()
    sys.stdout.flush()
    os._exit(0)


def main(rank, world, port, out):
    os.environ.update(USE_LIBUV="0", GLOO_SOCKET_IFNAME="lo")
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    run_checks(CHECKS, rank, world, out)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
