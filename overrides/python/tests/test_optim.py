"""metalcore.optim.AdamW against torch.optim.AdamW."""
import copy

import pytest
import torch

import metalcore


def params(device, dtype):
    torch.manual_seed(1)
    shapes = [(3, 5), (1,), (0,), (130,), (4, 4, 9)]
    return [torch.randn(*s, device=device, dtype=dtype).requires_grad_() for s in shapes]


def run(opt_cls, ps, steps, grads, sched=False, **kw):
    opt = opt_cls([{"params": ps[:2]}, {"params": ps[2:], "lr": 3e-3}], **kw)
    sch = torch.optim.lr_scheduler.StepLR(opt, step_size=7, gamma=0.5) if sched else None
    for s in range(steps):
        for p, g in zip(ps, grads[s]):
            p.grad = g.to(p.dtype)
        opt.step()
        if sch:
            sch.step()
    return opt


@pytest.mark.parametrize("kw", [dict(lr=1e-2), dict(lr=1e-2, weight_decay=0.1, amsgrad=True),
                                dict(lr=1e-2, maximize=True, betas=(0.8, 0.99), eps=1e-6)])
@pytest.mark.parametrize("sched", [False, True])
def test_float32_trajectory_matches_torch(device, kw, sched):
    ours, theirs = params(device, torch.float32), params(device, torch.float32)
    grads = [[torch.randn_like(p) for p in ours] for _ in range(30)]
    run(metalcore.optim.AdamW, ours, 30, grads, sched, **kw)
    run(torch.optim.AdamW, theirs, 30, grads, sched, **kw)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_bfloat16_params_follow_a_float32_master(device):
    ours = params(device, torch.bfloat16)
    master = [p.detach().float().requires_grad_() for p in ours]
    grads = [[torch.randn(p.shape, device=device) for p in ours] for _ in range(30)]
    opt = run(metalcore.optim.AdamW, ours, 30, grads, lr=1e-2)
    run(torch.optim.AdamW, master, 30, grads, lr=1e-2)
    for a, b in zip(ours, master):
        torch.testing.assert_close(a.float(), b, rtol=0.05, atol=0.05)
    for st in opt.state.values():
        assert st["exp_avg"].dtype == torch.float32 and st["exp_avg_sq"].dtype == torch.float32


def test_state_dict_round_trip_mid_run(device):
    ps = params(device, torch.float32)
    ref = params(device, torch.float32)
    grads = [[torch.randn_like(p) for p in ps] for _ in range(20)]
    opt = run(metalcore.optim.AdamW, ps, 10, grads[:10], lr=1e-2, amsgrad=True)
    saved, saved_ps = copy.deepcopy(opt.state_dict()), [p.detach().clone() for p in ps]
    fresh = [p.detach().clone().requires_grad_() for p in saved_ps]
    opt2 = metalcore.optim.AdamW([{"params": fresh[:2]}, {"params": fresh[2:], "lr": 3e-3}], lr=1e-2, amsgrad=True)
    opt2.load_state_dict(saved)
    for s in range(10, 20):
        for p, g in zip(fresh, grads[s]):
            p.grad = g
        opt2.step()
    torch_opt = run(torch.optim.AdamW, ref, 20, grads, lr=1e-2, amsgrad=True)
    assert torch_opt is not None
    for a, b in zip(fresh, ref):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_fallback_for_float64_and_noncontiguous():
    p64 = torch.randn(4, 4, dtype=torch.float64, requires_grad=True)
    pnc = torch.randn(4, 6)[:, :3].clone().t().requires_grad_()  # non-contiguous
    r64, rnc = p64.detach().clone().requires_grad_(), pnc.detach().clone().requires_grad_()
    for ps, cls in (([p64, pnc], metalcore.optim.AdamW), ([r64, rnc], torch.optim.AdamW)):
        opt = cls(ps, lr=1e-2)
        for _ in range(5):
            for p in ps:
                p.grad = torch.ones_like(p)
            opt.step()
    torch.testing.assert_close(p64, r64)
    torch.testing.assert_close(pnc, rnc)


def test_invalid_hyper_parameters_raise_like_torch():
    p = [torch.zeros(2, requires_grad=True)]
    for kw in (dict(lr=-1), dict(betas=(1.0, 0.9)), dict(eps=-1), dict(weight_decay=-1)):
        with pytest.raises(ValueError):
            torch.optim.AdamW(p, **kw)
        with pytest.raises(ValueError):
            metalcore.optim.AdamW(p, **kw)


def _grads_with_gaps(ps, steps):
    """Random gradients, none for the second tensor on odd steps (its step
    count then lags the others': tensors of one call take different steps)."""
    return [[None if (i == 1 and s % 2) else torch.randn_like(p) for i, p in enumerate(ps)] for s in range(steps)]


def _run_with_gaps(opt, ps, grads):
    for gs in grads:
        for p, g in zip(ps, gs):
            p.grad = None if g is None else g.to(p.dtype)
        opt.step()


@pytest.mark.parametrize("tensor_lr", [False, True])
def test_capturable_trajectory_matches_torch(device, tensor_lr):
    kw = dict(weight_decay=0.1, amsgrad=True)
    ours, theirs = params(device, torch.float32), params(device, torch.float32)
    ours.append(torch.randn(5, device=device, dtype=torch.float64, requires_grad=True))  # PyTorch's arithmetic
    theirs.append(ours[-1].detach().clone().requires_grad_())
    grads = _grads_with_gaps(ours, 12)
    lr = torch.tensor(1e-2, device=device) if tensor_lr else 1e-2
    opt = metalcore.optim.AdamW(ours, lr=lr, capturable=True, **kw)
    _run_with_gaps(opt, ours, grads)
    _run_with_gaps(torch.optim.AdamW(theirs, lr=1e-2, **kw), theirs, grads)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    steps = [opt.state[p]["step"] for p in ours if p.numel() or p in opt.state]
    assert all(s.device == ours[0].device and s.dtype == torch.float32 for s in steps)
    assert sorted({float(s) for s in steps}) == [6.0, 12.0]


def test_capturable_found_inf_skips_everything(device):
    ps = params(device, torch.float32)
    opt = metalcore.optim.AdamW(ps, lr=1e-2, capturable=True)
    for p in ps:
        p.grad = torch.randn_like(p)
    opt.step()
    before = [p.detach().clone() for p in ps] + [opt.state[p]["exp_avg"].clone() for p in ps]
    steps = [opt.state[p]["step"].clone() for p in ps]
    inf = torch.ones(1, device=device)
    opt.grad_scale, opt.found_inf = torch.full((1,), 4.0, device=device), inf  # as GradScaler sets them
    opt.step()
    del opt.grad_scale, opt.found_inf
    after = [p.detach() for p in ps] + [opt.state[p]["exp_avg"] for p in ps]
    for a, b in zip(after, before):
        assert torch.equal(a, b)
    for p, s in zip(ps, steps):
        assert torch.equal(opt.state[p]["step"], s)


@pytest.mark.skipif(not torch.cuda.is_available() or "cuda" not in metalcore.backends(), reason="needs CUDA")
def test_capturable_step_in_a_cuda_graph():
    """A step captured once and replayed matches eager steps, with the lr
    changed between replays through its tensor."""
    torch.manual_seed(0)
    ps = [torch.randn(s, device="cuda", requires_grad=True) for s in ((64, 33), (7,), (4096,))]
    ref = [p.detach().clone().requires_grad_() for p in ps]
    lr = torch.tensor(1e-2, device="cuda")
    opt = metalcore.optim.AdamW(ps, lr=lr, capturable=True, weight_decay=0.1)
    eager = metalcore.optim.AdamW(ref, lr=1e-2, weight_decay=0.1)
    static = [torch.randn_like(p) for p in ps]
    for p, g in zip(ps, static):
        p.grad = g
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside the graph: state made, kernels loaded
        opt.step()
    torch.cuda.current_stream().wait_stream(side)
    for p, g in zip(ref, static):
        p.grad = g.clone()
    eager.step()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        opt.step()
    for i in range(5):
        new = [torch.randn_like(p) for p in ps]
        for g, n in zip(static, new):
            g.copy_(n)
        lr.fill_(1e-2 / (i + 1))
        eager.param_groups[0]["lr"] = 1e-2 / (i + 1)
        graph.replay()
        for p, n in zip(ref, new):
            p.grad = n
        eager.step()
    torch.cuda.synchronize()
    for a, b in zip(ps, ref):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert float(opt.state[ps[0]]["step"]) == 6.0


@pytest.mark.parametrize("change", ["param moved", "grad non-contiguous", "grad dropped", "grad gained",
                                    "grad on the host", "param replaced", "step count set"])
def test_kept_plan_follows_changes(change):
    """A step after its parameters' data moved or their gradients changed
    (layout, presence, device), a parameter of the group was replaced or a
    step count was set steps what PyTorch's does: the kept plan is made
    again, not reused with stale descriptions."""
    torch.manual_seed(3)
    device = "cuda" if change == "grad on the host" else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs CUDA: a gradient moved to the host")
    ps = [torch.randn(4, 6, device=device, requires_grad=True) for _ in range(3)]
    qs = [p.detach().clone().requires_grad_() for p in ps]
    ours, theirs = metalcore.optim.AdamW(ps, lr=1e-2), torch.optim.AdamW(qs, lr=1e-2, foreach=False)

    def step(grads):
        for p, q, g in zip(ps, qs, grads):
            p.grad, q.grad = (None, None) if g is None else (g.clone(), g.clone())
        ours.step()
        theirs.step()
        for p, q in zip(ps, qs):
            torch.testing.assert_close(p, q)

    def fresh(gone=None):
        return [None if i == gone else torch.randn(4, 6, device=device) for i in range(len(ps))]

    step(fresh(gone=1 if change == "grad gained" else None))
    step(fresh(gone=1 if change == "grad gained" else None))
    if change == "param moved":
        for p, q in zip(ps, qs):
            p.data, q.data = p.detach().clone(), q.detach().clone()
        step(fresh())
    elif change == "grad non-contiguous":
        step([torch.randn(6, 4, device=device).t() for _ in ps])
    elif change == "grad dropped":
        step(fresh(gone=0))
    elif change == "grad gained":
        step(fresh())
    elif change == "param replaced":  # by a new parameter on the same data: fresh state in PyTorch's AdamW
        ps[1] = ours.param_groups[0]["params"][1] = ps[1].detach().requires_grad_()
        qs[1] = theirs.param_groups[0]["params"][1] = qs[1].detach().requires_grad_()
        step(fresh())
    elif change == "step count set":
        for opt, ts in ((ours, ps), (theirs, qs)):
            opt.state[ts[2]]["step"] = torch.tensor(7.0)
        step(fresh())
    else:
        step(fresh())
        for p in ps:  # .data swaps a tensor's storage without the .grad setter's checks
            p.grad = torch.randn(4, 6, device=device)
            p.grad.data = torch.randn(4, 6)
        with pytest.raises(Exception):
            ours.step()
        return
    step(fresh())
