"""Timing whole training steps as Google Benchmark times trainbench's: the wall clock on the
CPU; on a GPU also CUDA events around each step, summed, as trainbench's device time; the
step count grown until a run lasts --min_time. Imports torch: only after the re-exec."""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from torchpeer.session import Session


@dataclass
class Trial:
    steps: int
    wall: float                  # wall time of the steps, host gaps between them included
    cpu: float                   # this process' CPU time over them
    device: float | None = None  # GPU: the steps' device time, CUDA events around each step



def timed(session: Session, n: int) -> Trial:
    """n steps: their wall time (on a GPU until the device has finished them) and on a GPU
    also their device time, the sum of each step's CUDA events, as trainbench measures its
    own (bench/run/harness.cpp run_train): the host's gaps between steps count in the wall time
    only. The events are made before the clock starts."""
    if not session.cuda:
        wall0, cpu0 = time.perf_counter(), time.process_time()
        session.steps(n)
        return Trial(n, time.perf_counter() - wall0, time.process_time() - cpu0)
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(n)]
    torch.cuda.synchronize()
    wall0, cpu0 = time.perf_counter(), time.process_time()
    session.steps(n, events)
    torch.cuda.synchronize()
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    device = sum(start.elapsed_time(end) for start, end in events) * 1e-3
    return Trial(n, wall, cpu, device)


def next_step_count(trial: Trial, min_time: float) -> int:
    """Google Benchmark's rule: grow the count towards 1.4 x min_time, by at most 10x after
    a run too short to predict from, and always by at least one step."""
    multiplier = min_time * 1.4 / max(trial.wall, 1e-9)
    if trial.wall / min_time <= 0.1:
        multiplier = min(10.0, multiplier)
    if multiplier <= 1.0:
        multiplier = 2.0
    return max(round(multiplier * trial.steps), trial.steps + 1)


def run_repetition(session: Session, steps: int, min_time: float) -> Trial:
    """Whole steps until they take at least min_time; the last run counts, as in Google
    Benchmark (its earlier, shorter runs only size it)."""
    while True:
        trial = timed(session, steps)
        if trial.wall >= min_time or steps >= 1_000_000_000:
            return trial
        steps = next_step_count(trial, min_time)
