"""PyTorch definitions of trainbench's models (BUILDERS, by model name) and their counts:
parameters and FLOPs per sample, taken on the meta device and checked against trainbench's so
that a definition that drifted gives no comparison. Imports torch: only after the re-exec."""
from __future__ import annotations

import math
import sys

import torch
from torch import nn

from torchpeer import PROG, CheckFailed
from torchpeer.workloads import PYTORCH_MODELS, Workload, skip_reason


def mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(784, 1000), nn.ReLU(), nn.Linear(1000, 1000), nn.ReLU(),
                         nn.Linear(1000, 10))


def lenet5() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 6, 5), nn.Sigmoid(), nn.MaxPool2d(2),      # 6x28x28 -> 6x14x14
        nn.Conv2d(6, 16, 5), nn.Sigmoid(), nn.MaxPool2d(2),     # 16x10x10 -> 16x5x5
        nn.Conv2d(16, 120, 4), nn.Sigmoid(), nn.Flatten(),      # 120x2x2 = 480
        nn.Linear(480, 84), nn.Sigmoid(), nn.Linear(84, 10))


class SineLSTM(nn.Module):
    """Linear 1->5, LSTM(5, 5) over time-major (T, N, 5), linear 5->1 at every step."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(1, 5)
        self.lstm = nn.LSTM(5, 5)
        self.fc2 = nn.Linear(5, 1)
        # PyTorch's LSTM adds two bias vectors per gate where trainbench (and the textbook
        # cell) has one; their sum is the same function. Holding the second at zero, out of
        # training, gives the same parameters as trainbench (236) at the cost of one add.
        with torch.no_grad():
            self.lstm.bias_hh_l0.zero_()
        self.lstm.bias_hh_l0.requires_grad_(False)

    def forward(self, x):
        out, _ = self.lstm(self.fc1(x))  # zero initial state, as trainbench
        return self.fc2(out)


class Bottleneck(nn.Module):
    """ResNet v1.5 bottleneck: 1x1 reduce, 3x3 carrying the stride, 1x1 expand x4."""

    def __init__(self, cin: int, width: int, stride: int):
        super().__init__()
        cout = width * 4
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        nn.init.zeros_(self.bn3.weight)  # the residual branch starts as zero (gamma = 0)
        self.relu = nn.ReLU(inplace=True)
        self.shortcut = None
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                          nn.BatchNorm2d(cout))

    def forward(self, x):
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        y += x if self.shortcut is None else self.shortcut(x)
        return self.relu(y)


def resnet152(classes: int) -> nn.Module:
    layers = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True),
              nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for stage, blocks in enumerate((3, 8, 36, 3)):
        width = 64 << stage
        for b in range(blocks):
            layers.append(Bottleneck(cin, width, 2 if stage > 0 and b == 0 else 1))
            cin = width * 4
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes)]
    model = nn.Sequential(*layers)
    for m in model.modules():
        if isinstance(m, nn.Conv2d):  # He initialisation for ReLU networks, as torchvision
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
    return model


# A PyTorch definition of each of trainbench's models that the peer can train, by model
# name; it gets the workload (for its classes). A new model of trainbench's is measured here
# once it has an entry (and its name is in PYTORCH_MODELS, workloads.py, read before torch loads).
BUILDERS = {
    "mlp": lambda w: mlp(),
    "lenet5": lambda w: lenet5(),
    "lstm": lambda w: SineLSTM(),
    "resnet152": lambda w: resnet152(w.classes),
}
assert tuple(BUILDERS) == PYTORCH_MODELS, "BUILDERS and PYTORCH_MODELS name the same models"


def build_model(w: Workload) -> nn.Module:
    return BUILDERS[w.model](w)


def example_input(w: Workload, batch: int) -> torch.Tensor:
    """A batch of the workload's input: (N, *input_shape), or time-major (T, N, *input_shape)."""
    if w.seq_len:
        return torch.zeros(w.seq_len, batch, *w.input_shape)
    return torch.zeros(batch, *w.input_shape)


# ---- parameters and FLOPs (results/SCHEMA.md) ----------------------------------------------

def parameter_count(model: nn.Module) -> int:
    """Trained parameters: BatchNorm's gamma and beta count, its running statistics are
    buffers and do not (as trainbench)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def count_model(w: Workload) -> tuple[int, int, int]:
    """Parameters, forward multiply-accumulates per sample of the workload's model, and of
    those the products with the model's input (engine/core/spec.cpp model_cost).

    MACs of the Linear, Conv2d and LSTM layers come from the shapes that a forward pass of
    one sample gives each layer (pooling, batch norm, activations, adds and the loss are not
    counted, as in trainbench). The pass runs on a copy of the model on the meta device:
    shapes without arithmetic, so counting ResNet-152 at 224x224 costs no compute."""
    with torch.random.fork_rng():  # building the copy must not move the training seed
        model = build_model(w).to("meta")
    example = example_input(w, 1).to("meta")
    macs, input_macs = [], []

    def hook(module, inputs, output):
        fed_by_input = inputs[0] is example
        if isinstance(module, nn.Linear):
            rows = output.numel() // module.out_features  # 1, or T for a sequence
            macs.append(rows * module.in_features * module.out_features)
        elif isinstance(module, nn.Conv2d):
            cout, h, wd = output.shape[1:]
            kh, kw = module.kernel_size
            macs.append(cout * h * wd * (module.in_channels // module.groups) * kh * kw)
        elif isinstance(module, nn.LSTM):
            steps = output[0].shape[0]
            i, h = module.input_size, module.hidden_size
            macs.append(module.num_layers * steps * 4 * h * (i + h))
            if fed_by_input:  # only the input-to-gate products take the model's input
                input_macs.append(steps * 4 * h * i)
            return
        if fed_by_input:
            input_macs.append(macs[-1])

    for m in model.modules():
        if isinstance(m, (nn.Linear, nn.Conv2d, nn.LSTM)):
            m.register_forward_hook(hook)
    with torch.no_grad():
        try:
            model.eval()(example)
        except RuntimeError as e:  # e.g. a layer that no longer fits trainbench's input shape
            raise CheckFailed(f"{w.model}: the PyTorch definition does not take trainbench's input "
                              f"{list(w.input_shape)} ({e})") from None
    return parameter_count(model), sum(macs), sum(input_macs)


def train_flops_per_sample(macs: int, input_macs: int) -> int:
    """Forward, weight gradients and input gradients of every layer but those fed by the
    model's input (nothing upstream needs theirs): 2 x (3 x MACs - input layers' MACs)."""
    return 2 * (3 * macs - input_macs)


def count_mismatch(w: Workload, params: int, macs: int, input_macs: int) -> str | None:
    """What differs between the PyTorch model's counts and trainbench's JSON, or None. FLOPs
    are compared to one part in 10^9: the JSON carries them as floating-point numbers, and any
    layer that drifted changes them far more."""
    drift = []
    if params != w.params:
        drift.append(f"{params} parameters in PyTorch, {w.params} in trainbench")
    if not math.isclose(2 * macs, w.forward_flops_per_sample, rel_tol=1e-9):
        drift.append(f"{2 * macs} forward FLOPs per sample in PyTorch, "
                     f"{w.forward_flops_per_sample:.17g} in trainbench")
    train = train_flops_per_sample(macs, input_macs)
    if not math.isclose(train, w.train_flops_per_sample, rel_tol=1e-9):
        drift.append(f"{train} training FLOPs per sample in PyTorch, "
                     f"{w.train_flops_per_sample:.17g} in trainbench")
    if not drift:
        return None
    return (f"{w.model}/{w.dataset}: {'; '.join(drift)}: {PROG}'s definition of {w.model} no longer "
            f"matches trainbench's (fix its builder in BUILDERS)")


def list_models(args) -> int:
    """trainbench --list_models' table, from the torch models of trainbench's workloads; 1
    when a model's counts differ from trainbench's (said on stderr)."""
    print(f"{'model':<10} {'dataset':<9} {'batch':>6} {'params':>12} {'fwd GFLOP/sample':>16} "
          f"{'train GFLOP/step':>16}")
    status = 0
    for w in args.workloads:
        if w.model not in BUILDERS:
            print(f"{PROG}: {w.model}/{w.dataset} not listed: {skip_reason(w)}", file=sys.stderr)
            continue
        try:
            params, macs, input_macs = count_model(w)
        except CheckFailed as e:
            print(f"{PROG}: {e}", file=sys.stderr)
            status = 1
            continue
        b = args.batch or w.batch
        print(f"{w.model:<10} {w.dataset:<9} {b:>6} {params:>12} "
              f"{2 * macs * 1e-9:>16.6g} {train_flops_per_sample(macs, input_macs) * b * 1e-9:>16.6g}")
        mismatch = count_mismatch(w, params, macs, input_macs)
        if mismatch:
            print(f"{PROG}: {mismatch}", file=sys.stderr)
            status = 1
    return status
