"""What the Python package's benchmarks share: the devices a run measures,
each device's description, with PyTorch's CPU threads set to metalcore's
(CPU comparisons run at equal thread counts), a call's median time, the
time per call of back-to-back calls, and two calls' such times in
alternating rounds."""
import contextlib
import statistics
import sys
import time

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


def timed(fn, device, rounds=None):
    """fn's median time in ms over rounds timed calls (20 on CUDA, where a
    call takes a millisecond or less, 5 on the CPU)."""
    rounds = rounds or (20 if device == "cuda" else 5)
    fn()
    times = []
    for _ in range(rounds):
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def round_us(fn, calls, device="cpu"):
    """The mean time of calls back-to-back calls of fn, in microseconds (on
    CUDA, host time: the GPU drained before and after, not inside)."""
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    us = (time.perf_counter() - start) / calls * 1e6
    if device == "cuda":
        torch.cuda.synchronize()
    return us


def per_call_us(fn, calls, rounds=9, device="cpu"):
    """fn's time per call in microseconds: the median of rounds rounds of
    round_us, after one untimed call."""
    return interleaved_us([fn], calls, rounds, device)[0]


def interleaved_us(fns, calls, rounds, device="cpu"):
    """Each of fns' time per call in microseconds: the median over rounds
    of round_us (interleaved)."""
    return [statistics.median(t) for t in interleaved(fns, rounds, lambda fn: round_us(fn, calls, device))]


def interleaved(fns, rounds, measure):
    """Each of fns' rounds measures (measure(fn) each), every round
    measuring each of fns in turn, so that a slow spell of the host falls
    on all of them alike, after an untimed call of each."""
    for fn in fns:
        fn()
    results = [[] for _ in fns]
    for _ in range(rounds):
        for r, fn in zip(results, fns):
            r.append(measure(fn))
    return results


def paired_us(ours, theirs, calls, rounds, device="cpu", around=contextlib.nullcontext):
    """(ours, theirs): the median over rounds of round_us of each, their
    rounds alternating (theirs first), so that both see the same host (its
    speed drifts over seconds on a shared machine), after an untimed call
    of each; ours' calls run inside around()."""
    with around():
        ours()
    theirs()
    t_ours, t_theirs = [], []
    for _ in range(rounds):
        t_theirs.append(round_us(theirs, calls, device))
        with around():
            t_ours.append(round_us(ours, calls, device))
    return statistics.median(t_ours), statistics.median(t_theirs)
