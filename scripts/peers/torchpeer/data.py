"""Synthetic data as trainbench makes it (datasets/sources.cpp, datasets/sine.cpp), made into a
pool of whole batches before timing starts (no loader cost): class-dependent images, and
windows of a sine wave. Imports torch: only after the re-exec."""
from __future__ import annotations

import math

import torch

from torchpeer.workloads import Workload

# datasets/sine.hpp: the wave the LSTM learns (its window, seq_len, comes from the JSON).
SINE_PERIOD = 25.0
SINE_TRAIN_LENGTH = 20000


def synthetic_pool(w: Workload, batch: int, seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Whole batches of class-dependent images, normalised, made before timing starts.

    As trainbench: each class has a fixed random pattern (128 + N(0, 48^2) per pixel) and a
    sample is its class's pattern plus N(0, 48^2) noise, clipped to bytes; 8192 samples (256
    at 224x224), at least two batches; each channel normalised with the set's mean and
    standard deviation. The patterns come from their own generator per class, so the 1000
    ImageNet classes never need to be held at once."""
    features = math.prod(w.input_shape)
    count = max(8192 if features <= 4096 else 256, 2 * batch)
    gen = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, w.classes, (count,), generator=gen)
    images = torch.empty(count, features)
    for c in labels.unique().tolist():
        where = (labels == c).nonzero().flatten()
        pattern = 128 + 48 * torch.randn(features, generator=torch.Generator().manual_seed(12345 + c))
        images[where] = pattern + 48 * torch.randn(len(where), features, generator=gen)
    images.clamp_(0, 255).floor_()  # the byte a uint8 pixel holds
    images = images.view(count, *w.input_shape)
    channels = w.input_shape[0] if len(w.input_shape) == 3 else 1
    per_channel = images.view(count, channels, -1).transpose(0, 1).reshape(channels, -1)
    mean, std = per_channel.mean(dim=1), per_channel.std(dim=1)
    view = (1, channels, 1, 1) if len(w.input_shape) == 3 else (1, 1)
    images = (images - mean.view(view)) / std.view(view)
    steps = count // batch  # the samples past the last whole batch are dropped, as trainbench
    return [(images[s * batch:(s + 1) * batch].contiguous(), labels[s * batch:(s + 1) * batch].clone())
            for s in range(steps)]


def sine_pool(seq_len: int, batch: int, seed: int, steps: int = 64) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Windows of sin(2 pi t / 25) at random phases over t in [0, 20000): input (T, N, 1),
    target the wave one step later."""
    gen = torch.Generator().manual_seed(seed)
    pool = []
    t = torch.arange(seq_len, dtype=torch.float64).view(seq_len, 1)
    for _ in range(steps):
        start = torch.randint(0, SINE_TRAIN_LENGTH - seq_len - 1, (1, batch), generator=gen)
        x = (start + t) * (2 * math.pi / SINE_PERIOD)
        step = 2 * math.pi / SINE_PERIOD
        pool.append((torch.sin(x).float().unsqueeze(2).contiguous(),
                     torch.sin(x + step).float().unsqueeze(2).contiguous()))
    return pool
