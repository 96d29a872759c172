"""One benchmark's training session: the model, the optimizer trainbench's workload asks for,
and the data pool, on the CPU or a GPU in the layout and precision chosen, with the steps
that are timed and the check that the loss fell. Imports torch: only after the re-exec."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import nn

from torchpeer import PROG, CheckFailed
from torchpeer.data import sine_pool, synthetic_pool
from torchpeer.models import build_model
from torchpeer.workloads import Optimizer, Workload


@dataclass
class Session:
    """One benchmark's model, optimiser and data, kept across its repetitions (warm-up once),
    as trainbench keeps its training session across Google Benchmark's runs. On a GPU the
    steps run under autocast in fp16 and bf16, fp16's with a GradScaler."""
    model: nn.Module
    loss_fn: nn.Module
    optimizer: torch.optim.Optimizer
    pool: list
    position: int = 0
    loss_first: float | None = None
    last_loss: torch.Tensor | None = field(default=None, repr=False)
    autocast: torch.dtype | None = None
    scaler: object | None = None
    cuda: bool = False

    def _loss(self, x, y):
        if self.autocast is None:
            return self.loss_fn(self.model(x), y)
        with torch.autocast("cuda", dtype=self.autocast):
            return self.loss_fn(self.model(x), y)

    def steps(self, n: int, events: list | None = None) -> None:
        """n training steps, with a pair of CUDA events recorded around each where given; the
        benchmark's very first one also records loss_first, the loss of the first batch before
        any update (the check's reference)."""
        if n > 0 and self.loss_first is None:
            self._run(1, events)
            self.loss_first = float(self.last_loss)
            n -= 1
            events = events[1:] if events else events
        if n > 0:
            self._run(n, events)

    def _run(self, n: int, events: list | None) -> None:
        # The loop holds nothing but PyTorch's own work: batches come from the pool, the
        # loss stays a tensor until the run ends. A step's events span what trainbench's
        # device time spans: taking the batch to the end of the update.
        model, loss_fn, opt, pool = self.model, self.loss_fn, self.optimizer, self.pool
        position, size = self.position, len(pool)
        loss = None
        scaler = self.scaler
        for i in range(n):
            if events is not None:
                events[i][0].record()
            x, y = pool[position]
            position = position + 1 if position + 1 < size else 0
            opt.zero_grad(set_to_none=True)
            if self.autocast is None:
                loss = loss_fn(model(x), y)
            else:
                loss = self._loss(x, y)
            if scaler is None:
                loss.backward()
                opt.step()
            else:
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
            if events is not None:
                events[i][1].record()
        self.position = position
        self.last_loss = loss

    def check(self) -> float:
        """The last loss, after checking it is finite and that training lowered the loss of
        the first batch (a training-mode forward on it now, outside the timing)."""
        last = float(self.last_loss)
        if not math.isfinite(last):
            raise CheckFailed(f"loss is not finite: {last}")
        x, y = self.pool[0]
        with torch.no_grad():
            after = float(self._loss(x, y))
        if not after < self.loss_first:
            raise CheckFailed(f"loss did not fall: {self.loss_first:.5g} on the first batch "
                              f"before training, {after:.5g} after (a model still on its initial "
                              f"plateau needs more steps: raise --warmup_steps)")
        return last


def make_session(w: Workload, batch: int, optimizer: Optimizer, args, precision: str = "fp32",
                 layout: str | None = None) -> Session:
    """The model, optimizer and data of a benchmark; images and the model in the layout named
    (nchw when None, channels_last), on the CPU or the GPU."""
    if w.dataset == "sine":
        pool, loss_fn = sine_pool(w.seq_len, batch, args.seed), nn.MSELoss()
    elif w.task == "classification" and not w.seq_len:
        pool, loss_fn = synthetic_pool(w, batch, args.seed), nn.CrossEntropyLoss()
    else:
        raise CheckFailed(f"{PROG} has no synthetic data for {w.model}/{w.dataset} ({w.task}"
                          f"{', sequences' if w.seq_len else ''}): add a generator to make_session")
    torch.manual_seed(args.seed)
    model = build_model(w)
    model.train()
    cuda = args.device == "cuda"
    memory_format = torch.channels_last if layout == "channels_last" else torch.contiguous_format
    if cuda:
        torch.backends.cudnn.benchmark = True
        torch.backends.cudnn.allow_tf32 = precision == "tf32"
        torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
        model = model.cuda()
    if layout == "channels_last":  # the 4-d weights and the images; nothing else changes
        model = model.to(memory_format=memory_format)
        pool = [(x.contiguous(memory_format=memory_format), y) for x, y in pool]
    params = [p for p in model.parameters() if p.requires_grad]
    # The same update as trainbench's (engine/optim/optimizer.cpp): weight decay added to the
    # gradient, SGD's momentum without dampening, Adam's bias-corrected moments.
    o = optimizer
    if o.kind == "adam":
        opt = torch.optim.Adam(params, lr=o.lr, betas=(o.beta1, o.beta2), eps=o.eps,
                               weight_decay=o.weight_decay)
    else:
        opt = torch.optim.SGD(params, lr=o.lr, momentum=o.momentum, weight_decay=o.weight_decay)
    if not cuda:
        return Session(model, loss_fn, opt, pool)
    # The data resident on the GPU (as trainbench --data_on_device), in the layout chosen.
    pool = [(x.cuda().contiguous(memory_format=memory_format) if x.dim() == 4 else x.cuda(), y.cuda())
            for x, y in pool]
    autocast = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(precision)
    scaler = torch.amp.GradScaler("cuda") if precision == "fp16" else None
    return Session(model, loss_fn, opt, pool, autocast=autocast, scaler=scaler, cuda=True)
