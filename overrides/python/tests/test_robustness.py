"""What a careful user runs into beyond the numbers: second derivatives,
forked workers, resuming an optimizer, pickling, TorchScript, nested
overrides, a wrong library path."""
import copy
import io
import multiprocessing
import os
import pickle
import re
import select
import signal
import subprocess
import sys
import warnings

import pytest
import torch
import torch.nn.functional as F

import metalcore

from conftest import HEADER, ORIGINALS

pytestmark = pytest.mark.usefixtures("restore_overrides")


# ---- double backward --------------------------------------------------------

def second_derivatives(f, device):
    """grad of |d/dx sum(f(x*w)^2)|^2 with respect to x and w."""
    torch.manual_seed(3)
    x = torch.randn(5, 16, device=device, requires_grad=True)
    w = torch.randn(16, device=device, requires_grad=True)
    g, = torch.autograd.grad(f(x * w).pow(2).sum(), x, create_graph=True)
    return torch.autograd.grad(g.pow(2).sum(), (x, w))


@pytest.mark.parametrize("name,ours,theirs", [
    ("gelu", metalcore.gelu, F.gelu),
    ("gelu tanh", lambda t: metalcore.gelu(t, "tanh"), lambda t: F.gelu(t, approximate="tanh")),
    ("silu", metalcore.silu, F.silu),
    ("softmax", metalcore.softmax, lambda t: F.softmax(t, -1)),
    ("layer_norm", metalcore.layer_norm, lambda t: F.layer_norm(t, t.shape[-1:])),
    ("rms_norm", metalcore.rms_norm, lambda t: t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + 1e-6)),
])
def test_double_backward_is_pytorchs(device, name, ours, theirs):
    for a, b in zip(second_derivatives(ours, device), second_derivatives(theirs, device)):
        assert a is not None
        torch.testing.assert_close(a, b, rtol=2e-4, atol=2e-4, msg=name)


def test_double_backward_through_patched_functions(device):
    want = second_derivatives(lambda t: F.layer_norm(F.gelu(t), t.shape[-1:]), device)
    with metalcore.pytorch_overrides(ops=list(metalcore.ALL)):
        got = second_derivatives(lambda t: F.layer_norm(F.gelu(t), t.shape[-1:]), device)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=2e-4, atol=2e-4)


# ---- functorch transforms ---------------------------------------------------------

@pytest.mark.skipif(not hasattr(torch, "func"), reason="torch.func (functorch's transforms) is PyTorch 2's")
def test_functorch_transforms_compute_with_pytorch():
    x = torch.randn(3, 4, 8)
    w = torch.randn(8)
    cases = [(metalcore.silu, F.silu), (metalcore.softmax, lambda t: F.softmax(t, -1)),
             (lambda t: metalcore.rms_norm(t, w), lambda t: t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + 1e-6) * w),
             (lambda t: metalcore.layer_norm(t, w, None), lambda t: F.layer_norm(t, (8,), w))]
    for ours, theirs in cases:
        torch.testing.assert_close(torch.func.vmap(ours)(x), torch.func.vmap(theirs)(x))
        torch.testing.assert_close(torch.func.grad(lambda t: ours(t).square().sum())(x),
                                   torch.func.grad(lambda t: theirs(t).square().sum())(x))


# ---- fork ---------------------------------------------------------------------

def test_forked_child_computes_with_pytorch():
    """A child forked after loading gets PyTorch's results (one warning);
    the library itself refuses there with MC_ERR_BACKEND, never hangs."""
    x = torch.randn(3, 1000)
    metalcore.gelu(x)  # the parent has used the library
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        ok = False
        try:
            torch.set_num_threads(1)  # as DataLoader workers do: PyTorch's own thread pool is not fork-safe
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                y = metalcore.gelu(x)
                z = metalcore.softmax(torch.randn(1, 1000000))
                ok = torch.equal(y, F.gelu(x)) and abs(z.sum().item() - 1) < 1e-4
                ok = ok and any("forked" in str(c.message) for c in caught)
                ok = ok and metalcore._lib.lib.mc_silu_fwd(None, None, None) == 5  # MC_ERR_BACKEND
                ok = ok and b"forked" in metalcore._lib.lib.mc_last_error()
        finally:
            os.write(w, b"1" if ok else b"0")
            os._exit(0)
    os.close(w)
    ready, _, _ = select.select([r], [], [], 60)
    if not ready:
        os.kill(pid, signal.SIGKILL)
    with os.fdopen(r, "rb") as f:
        got = f.read() if ready else b"hung"
    os.waitpid(pid, 0)
    assert got == b"1"


class GeluDataset(torch.utils.data.Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        torch.manual_seed(i)
        return metalcore.gelu(torch.randn(64, 256))


def test_dataloader_with_fork_workers():
    metalcore.gelu(torch.randn(4, 4))
    loader = torch.utils.data.DataLoader(GeluDataset(), batch_size=2, num_workers=2,
                                         multiprocessing_context="fork", timeout=60)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = torch.cat(list(loader))
    torch.manual_seed(0)
    want = []
    for i in range(8):
        torch.manual_seed(i)
        want.append(F.gelu(torch.randn(64, 256)))
    torch.testing.assert_close(got, torch.stack(want), rtol=1e-5, atol=1e-6)


# ---- errors, optimizer ----------------------------------------------------------

def _raise_metalcore_error(_):
    metalcore.softmax(torch.randn(2, 3), dim=0)  # ValueError, not from the library
    return None


def test_metalcore_error_pickles():
    e = metalcore.MetalcoreError("mc_x: bad", 1)
    for back in (pickle.loads(pickle.dumps(e)), copy.deepcopy(e)):
        assert str(back) == "mc_x: bad" and back.status == 1
    with pytest.raises(metalcore.MetalcoreError):
        metalcore._lib.check(1)


def _library_error(_):
    metalcore._lib.lib.mc_softmax_fwd(None, None, None)
    metalcore._lib.check(1)


def test_worker_error_reaches_the_parent():
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        with pytest.raises(metalcore.MetalcoreError) as e:
            pool.map(_library_error, [0], chunksize=1)
    assert "mc_softmax_fwd" in str(e.value) and e.value.status == 1


@pytest.mark.parametrize("source", ["metalcore", "torch"])
def test_bfloat16_adamw_resumes(source):
    torch.manual_seed(0)
    p = torch.randn(10, 7, dtype=torch.bfloat16, requires_grad=True)
    first = (metalcore.optim.AdamW if source == "metalcore" else torch.optim.AdamW)([p], lr=1e-2)
    p.grad = torch.randn_like(p)
    first.step()
    opt = metalcore.optim.AdamW([p], lr=1e-2)
    opt.load_state_dict(copy.deepcopy(first.state_dict()))
    st = opt.state[p]
    assert st["exp_avg"].dtype == torch.float32 and st["exp_avg_sq"].dtype == torch.float32
    torch.testing.assert_close(st["exp_avg"], first.state[p]["exp_avg"].float())
    opt.step()
    assert int(opt.state[p]["step"]) == 2


def test_refused_step_changes_nothing():
    p = torch.randn(5, requires_grad=True)
    q = torch.randn(3, requires_grad=True)
    opt = metalcore.optim.AdamW([p, q], lr=1e-2)
    p.grad, q.grad = torch.randn(5), torch.randn(3)
    opt.step()
    opt.param_groups[0]["lr"] = float("nan")  # refused by the library
    before = (p.detach().clone(), opt.state[p]["exp_avg"].clone(), int(opt.state[p]["step"]))
    with pytest.raises(metalcore.MetalcoreError):
        opt.step()
    assert torch.equal(p, before[0]) and torch.equal(opt.state[p]["exp_avg"], before[1])
    assert int(opt.state[p]["step"]) == before[2] == int(opt.state[q]["step"])


def test_eps_zero_as_pytorch():
    ps = [torch.tensor([0.5, -1.0, 2.0], requires_grad=True) for _ in range(2)]
    opts = [metalcore.optim.AdamW([ps[0]], lr=1e-2, eps=0.0), torch.optim.AdamW([ps[1]], lr=1e-2, eps=0.0)]
    for p, o in zip(ps, opts):
        p.grad = torch.tensor([0.1, 0.0, -0.3])
        o.step()
    torch.testing.assert_close(ps[0], ps[1], equal_nan=True)


# ---- TorchScript, pickling, nesting ----------------------------------------------

def test_torchscript_sees_pytorchs_functions():
    metalcore.enable_pytorch_overrides(ops=list(metalcore.ALL))
    for m in (torch.nn.GELU(), torch.nn.GELU(approximate="tanh"), torch.nn.SiLU(), torch.nn.Softmax(-1),
              torch.nn.LayerNorm(8)):
        s = torch.jit.script(m)
        x = torch.randn(3, 8)
        torch.testing.assert_close(s(x), m(x), rtol=1e-5, atol=1e-6)
    metalcore.disable_pytorch_overrides()
    torch.jit.script(torch.nn.GELU())


def test_modules_built_with_overrides_pickle():
    with metalcore.pytorch_overrides(ops=list(metalcore.ALL)):
        layer = torch.nn.TransformerEncoderLayer(16, 2, 32, activation=F.gelu, dropout=0.0)
        buf = io.BytesIO()
        torch.save(layer, buf)
    buf2 = io.BytesIO()
    torch.save(layer, buf2)  # after the overrides are off too
    for b in (buf, buf2):
        b.seek(0)
        back = torch.load(b, weights_only=False)
        x = torch.randn(4, 2, 16)
        layer.eval()
        back.eval()
        torch.testing.assert_close(back(x), layer(x))


def test_overrides_nest_and_compose():
    metalcore.enable_pytorch_overrides(ops=["gelu"])
    with metalcore.pytorch_overrides(ops=["silu"]):
        assert F.silu is not ORIGINALS["silu"] and F.gelu is ORIGINALS["gelu"]
        with metalcore.pytorch_overrides(ops=["softmax", "silu"]):
            assert set(metalcore.active_overrides()) == {"softmax", "silu"}
        assert set(metalcore.active_overrides()) == {"silu"}
    assert F.gelu is not ORIGINALS["gelu"] and F.silu is ORIGINALS["silu"]
    assert metalcore.active_overrides() == {"gelu": ["cpu", "cuda"]}
    metalcore.enable_pytorch_overrides(ops=["silu"])  # exactly silu now
    assert F.gelu is ORIGINALS["gelu"] and F.silu is not ORIGINALS["silu"]
    with pytest.raises(ValueError):
        metalcore.enable_pytorch_overrides(ops=["gleu"])


# ---- loading ---------------------------------------------------------------------

def test_missing_library_path_is_an_import_error():
    env = dict(os.environ, METALCORE_LIBRARY="/nonexistent/libmetalcore.so")
    r = subprocess.run([sys.executable, "-c", "import metalcore"], env=env, capture_output=True, text=True)
    assert r.returncode != 0
    assert "ImportError" in r.stderr and "/nonexistent/libmetalcore.so" in r.stderr


def test_every_function_is_typed():
    for name, (res, args) in metalcore._lib._SIGNATURES.items():
        fn = getattr(metalcore._lib.lib, name)
        assert fn.restype is res and fn.argtypes == args, name
    declared = set(re.findall(r"^[A-Za-z_][A-Za-z0-9_ ]*[ *]\s*(mc_[a-z0-9_]+)\(", HEADER.read_text(), re.M))
    assert declared == set(metalcore._lib._SIGNATURES)
