"""What metalcore tells about itself: info(), the CPU settings, what the
overrides sent back to PyTorch and why, and a library of another major
version refused at import."""
import logging
import os
import shutil
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import metalcore

pytestmark = pytest.mark.usefixtures("restore_overrides")


def test_info():
    i = metalcore.info()
    assert i["version"] == metalcore.__version__ and os.path.isfile(i["library"])
    assert i["backends"]["cpu"] == "available"
    assert i["backends"]["cuda"] == "available" or i["backends"]["cuda"].startswith("unavailable: ")
    assert i["cpu_isa"] in ("avx512", "avx2", "portable")
    assert i["cpu_threads"] == metalcore.cpu_threads() >= 1
    assert isinstance(i["custom_ops"], bool)
    with metalcore.pytorch_overrides(ops=["gelu"]):
        assert metalcore.info()["overrides"] == {"gelu": ["cpu", "cuda"]}


def test_cpu_threads():
    before = metalcore.cpu_threads()
    try:
        metalcore.set_cpu_threads(1)
        assert metalcore.cpu_threads() == 1
        x = torch.randn(64, 4096)
        torch.testing.assert_close(metalcore.softmax(x), F.softmax(x, -1))
        with pytest.raises(metalcore.MetalcoreError, match="mc_set_cpu_threads"):
            metalcore.set_cpu_threads(0)
        assert metalcore.cpu_threads() == 1
    finally:
        metalcore.set_cpu_threads(before)


def test_fallbacks_counted_and_logged(caplog):
    metalcore.reset_fallback_counts()
    metalcore.enable_pytorch_overrides(ops=["softmax", "silu", "layer_norm"])
    x = torch.randn(4, 6)
    with caplog.at_level(logging.INFO, logger="metalcore"):
        F.softmax(x, dim=0)
        F.softmax(x, dim=0)
        F.softmax(x.double(), dim=-1)
        F.silu(x, inplace=True)
        F.silu(x.t())
        F.silu(x.t())
        F.layer_norm(x.reshape(2, 2, 6), (2, 6))
        F.softmax(x, dim=-1)  # computed: not counted
    assert metalcore.fallback_counts() == {
        "softmax": {"dim other than the last": 2, "dtype float64": 1},
        "silu": {"inplace=True": 1, "non-contiguous": 2},
        "layer_norm": {"normalized over more than the last dimension": 1},
    }
    infos = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert len(infos) == 1 and "silu" in infos[0] and "non-contiguous" in infos[0]  # once, for the surprising one
    metalcore.reset_fallback_counts()
    assert metalcore.fallback_counts() == {}


def test_debug_log_from_the_environment():
    code = ("import torch, torch.nn.functional as F, metalcore\n"
            "metalcore.enable_pytorch_overrides(ops=['gelu'])\n"
            "F.gelu(torch.randn(3).double())\n")
    env = dict(os.environ, METALCORE_LOG="debug")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "gelu falls back to PyTorch: dtype float64" in r.stderr


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler to build a stand-in library")
@pytest.mark.parametrize("version,shown", [(10203, "1.2.3"), (200, "0.2.0")])
def test_other_major_or_older_minor_version_is_refused(tmp_path, version, shown):
    src = tmp_path / "fake.c"
    src.write_text(f"int mc_version(void) {{ return {version}; }}\n")
    lib = tmp_path / "libfake.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    env = dict(os.environ, METALCORE_LIBRARY=str(lib))
    r = subprocess.run([sys.executable, "-c", "import metalcore"], env=env, capture_output=True, text=True)
    assert r.returncode != 0
    assert "ImportError" in r.stderr and f"version {shown}" in r.stderr and "written for version 0." in r.stderr
