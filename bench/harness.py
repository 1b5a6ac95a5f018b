"""What the Python package's benchmarks share: the devices a run measures,
and each device's description, with PyTorch's CPU threads set to
metalcore's (CPU comparisons run at equal thread counts)."""
import sys

import torch

import metalcore


def devices(cpu_first=True):
    """The devices named on the command line, else the CPU and, where
    PyTorch sees one, CUDA."""
    found = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    return sys.argv[1:] or (found if cpu_first else found[::-1])


def on(device):
    """Prepares a device's measurements and describes it."""
    if device == "cuda":
        return torch.cuda.get_device_name()
    torch.set_num_threads(metalcore.cpu_threads())
    return f"CPU, {torch.get_num_threads()} threads"
