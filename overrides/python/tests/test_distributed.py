"""Scaling out on the CPU with gloo, two processes (dist_worker.py runs the
checks): FSDP2 and DDP stepped by metalcore's AdamW, a sharded checkpoint,
and norms, softmax and activations on DTensor inputs."""
import json
import os
import pathlib
import socket
import subprocess
import sys

import pytest
import torch

from metalcore import _dist

HERE = pathlib.Path(__file__).resolve().parent
WORLD = 2


def _fsdp2():
    try:
        from torch.distributed.fsdp import fully_shard  # noqa: F401
    except ImportError:
        try:
            from torch.distributed._composable.fsdp import fully_shard  # noqa: F401
        except ImportError:
            return False
    return True


AVAILABLE = (torch.distributed.is_available() and torch.distributed.is_gloo_available() and
             _dist.DTensor is not None and _fsdp2())
pytestmark = pytest.mark.skipif(not AVAILABLE, reason="this PyTorch has no gloo, DTensor or FSDP2 "
                                "(torch.distributed.fsdp.fully_shard)")

sys.path.insert(0, str(HERE))
CHECKS = sorted(__import__("dist_worker").CHECKS) if AVAILABLE else []


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """Each rank's answers, from one run of every check on both ranks."""
    out, port = tmp_path_factory.mktemp("dist"), _free_port()
    env = dict(os.environ, USE_LIBUV="0", GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, str(HERE / "dist_worker.py"), str(r), str(WORLD), str(port), str(out)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for r in range(WORLD)]
    logs = []
    for p in procs:
        try:
            logs.append(p.communicate(timeout=300)[0].decode(errors="replace"))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail("the two-process run took over 300 s")
    answers = {}
    for r in range(WORLD):
        path = out / f"{r}.json"
        assert path.exists(), f"rank {r} wrote no answers; output:\n{logs[r][-4000:]}"
        answers[r] = json.loads(path.read_text())
    return answers


@pytest.mark.parametrize("check", CHECKS)
def test_two_processes(results, check):
    for rank, answers in results.items():
        assert answers[check] is None, f"rank {rank}: {answers[check]}"
