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
