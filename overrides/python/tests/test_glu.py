"""metalcore.swiglu and geglu against PyTorch's expressions, forward and
backward, on every backend and dtype, including non-contiguous inputs (as
a fused gate_up projection's halves are) and the calls PyTorch keeps."""
import pytest
import torch
import torch.nn.functional as F

import metalcore
from conftest import TOL, close

EXPRESSIONS = {
    "swiglu": (lambda g, u: metalcore.swiglu(g, u), lambda g, u: F.silu(g) * u),
    "geglu": (lambda g, u: metalcore.geglu(g, u), lambda g, u: F.gelu(g) * u),
    "geglu tanh": (lambda g, u: metalcore.geglu(g, u, "tanh"), lambda g, u: F.gelu(g, approximate="tanh") * u),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", [(1,), (7,), (3, 33), (4, 1031), (2, 3, 4096)])
@pytest.mark.parametrize("op", sorted(EXPRESSIONS))
def test_matches_pytorch(device, dtype, shape, op):
    ours_fn, theirs_fn = EXPRESSIONS[op]
    gen = torch.Generator().manual_seed(len(shape) * 100 + shape[-1])
    g, u, dy = ((torch.randn(shape, generator=gen) * s).to(device=device, dtype=dtype) for s in (3, 1, 1))
    ours, theirs = [g.clone().requires_grad_(), u.clone().requires_grad_()], \
        [g.float().requires_grad_(), u.float().requires_grad_()]
    metalcore.reset_call_counts()
    got = ours_fn(*ours)
    want = theirs_fn(*theirs)
    assert got.dtype == dtype and metalcore.call_counts() == {"glu_fwd": 1}
    # GELU's lower tail: the erf approximation's absolute error is relative
    # error where gelu(x) is tiny (one element: nothing else to weigh it)
    tol = max(TOL[dtype], 2e-4) if op.startswith("geglu") else None
    close(got.float(), want, dtype, op, tol=tol)
    got.backward(dy)
    want.backward(dy.float())
    assert metalcore.call_counts() == {"glu_fwd": 1, "glu_bwd": 1}
    close(ours[0].grad.float(), theirs[0].grad, dtype, op + " dgate", tol=tol)
    close(ours[1].grad.float(), theirs[1].grad, dtype, op + " dup", tol=tol)


def test_halves_of_a_fused_projection():
    gate_up = torch.randn(6, 2 * 40, requires_grad=True)
    g, u = gate_up.chunk(2, -1)  # non-contiguous views: copied for the kernel
    metalcore.reset_call_counts()
    got = metalcore.swiglu(g, u)
    assert metalcore.call_counts() == {"glu_fwd": 1}
    ref = gate_up.detach().clone().requires_grad_()
    rg, ru = ref.chunk(2, -1)
    torch.testing.assert_close(got, F.silu(rg) * ru)
    got.sum().backward()
    (F.silu(rg) * ru).sum().backward()
    torch.testing.assert_close(gate_up.grad, ref.grad)


def test_second_derivative_is_pytorchs():
    g, u = torch.randn(5, 8, dtype=torch.float64).float().requires_grad_(), torch.randn(5, 8).requires_grad_()
    (dg,) = torch.autograd.grad(metalcore.swiglu(g, u).sum(), g, create_graph=True)
    (rg,) = torch.autograd.grad((F.silu(g) * u).sum(), g, create_graph=True)
    torch.testing.assert_close(dg, rg)
    torch.testing.assert_close(torch.autograd.grad(dg.sum(), u)[0], torch.autograd.grad(rg.sum(), u)[0])


@pytest.mark.parametrize("case", ["broadcast", "float64", "mixed dtypes"])
def test_pytorch_computes_the_rest(case):
    g, u = torch.randn(4, 6), torch.randn(4, 6)
    if case == "broadcast":
        u = torch.randn(6)
    elif case == "float64":
        g, u = g.double(), u.double()
    else:
        u = u.bfloat16()
    metalcore.reset_call_counts()
    metalcore.reset_fallback_counts()
    torch.testing.assert_close(metalcore.swiglu(g, u), F.silu(g) * u)
    assert metalcore.call_counts() == {} and "swiglu" in metalcore.fallback_counts()
    with pytest.raises(ValueError, match="approximate"):
        metalcore.geglu(g, u, "fast")
