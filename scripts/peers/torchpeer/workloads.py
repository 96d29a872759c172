"""trainbench's workloads as the peer reads them from `trainbench --list_models --json`, and
what trainbench's rules make of one under the peer's flags: its batch, optimizer, variant and
benchmark name. Standard library only."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from types import SimpleNamespace

from torchpeer import PROG

# The models BUILDERS defines in PyTorch (models.py: it needs torch, which loads after the
# re-exec); the benchmarks of any other model are skipped with a note. Named here so that a
# run that matches only those answers before torch loads.
PYTORCH_MODELS = ("mlp", "lenet5", "lstm", "resnet152")


@dataclass(frozen=True)
class Optimizer:
    """A workload's optimizer, as trainbench's OptimizerConfig; the names are the JSON's."""
    kind: str                # sgd (with momentum) or adam
    lr: float                # at lr_reference_batch when that is > 0, else at any batch
    momentum: float          # sgd's
    weight_decay: float      # L2 added to the gradient in both kinds (torch's weight_decay)
    beta1: float             # adam's
    beta2: float
    eps: float
    lr_reference_batch: int  # > 0: trainbench scales lr linearly with the batch


@dataclass(frozen=True)
class Workload:
    """One workload of trainbench --list_models --json; the names are the JSON's."""
    model: str
    dataset: str
    task: str                 # classification or regression
    classes: int              # 0 for regression
    input_shape: tuple        # one sample's (a sequence model's: one time step's)
    seq_len: int              # > 0: a sequence model, input (seq_len, N, *input_shape)
    batch: int
    gpu_batch: int            # the GPU rows' batch (equal to batch where there is no other)
    warmup_steps: int         # LeNet-5's sigmoids need ~100 steps to start learning
    real_data_only: bool      # trainbench has no synthetic data for it
    optimizer: Optimizer
    params: int
    forward_flops_per_sample: float
    train_flops_per_sample: float


JSON_KINDS = {int: "an integer", float: "a number", str: "a string", bool: "true or false",
              list: "a list"}


def json_fields(obj, where: str, **kinds) -> dict:
    """The named members of a JSON object, each checked to be of its kind (int, float, str,
    bool); members not named are ignored, so that trainbench can add some."""
    if not isinstance(obj, dict):
        raise ValueError(f"{where} is {json.dumps(obj)[:40]}, not an object")
    out = {}
    for key, kind in kinds.items():
        if key not in obj:
            raise ValueError(f"{where} has no {key!r}")
        v = obj[key]
        if kind is float:
            ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
        else:
            ok = isinstance(v, kind) and (kind is bool or not isinstance(v, bool))
        if not ok:
            raise ValueError(f"{where}: {key} is {json.dumps(v)[:40]}, not {JSON_KINDS[kind]}")
        out[key] = float(v) if kind is float else v
    return out


def workload_from_json(entry, index: int) -> Workload:
    names = json_fields(entry, f"workloads[{index}]", model=str, dataset=str)
    where = f"workload {names['model']}/{names['dataset']}"
    f = json_fields(entry, where, model=str, dataset=str, task=str, classes=int, seq_len=int,
                    batch=int, gpu_batch=int, warmup_steps=int, real_data_only=bool, params=int,
                    forward_flops_per_sample=float, train_flops_per_sample=float)
    shape = entry.get("input_shape")
    if not (isinstance(shape, list) and shape and
            all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in shape)):
        raise ValueError(f"{where}: input_shape is {json.dumps(shape)[:40]}, not a list of "
                         f"positive integers")
    o = json_fields(entry.get("optimizer"), f"{where} optimizer", kind=str, lr=float,
                    momentum=float, weight_decay=float, beta1=float, beta2=float, eps=float,
                    lr_reference_batch=int)
    if f["task"] not in ("classification", "regression"):
        raise ValueError(f"{where}: task {f['task']!r} is not classification or regression")
    if o["kind"] not in ("sgd", "adam"):
        raise ValueError(f"{where}: optimizer kind {o['kind']!r} is not sgd or adam")
    if f["batch"] < 1 or f["gpu_batch"] < 1 or f["seq_len"] < 0 or f["warmup_steps"] < 0:
        raise ValueError(f"{where}: batch {f['batch']}, gpu_batch {f['gpu_batch']}, seq_len "
                         f"{f['seq_len']}, warmup_steps {f['warmup_steps']}: one is out of range")
    return Workload(**f, input_shape=tuple(shape), optimizer=Optimizer(**o))


def skip_reason(w: Workload) -> str | None:
    """Why the peer cannot train a workload of trainbench's, or None."""
    if w.model not in PYTORCH_MODELS:
        return (f"{PROG} has no PyTorch definition of model '{w.model}' (add one to its BUILDERS "
                f"to compare with it)")
    if w.real_data_only:
        return (f"trainbench runs {w.model}/{w.dataset} on real data only, and {PROG} trains on "
                f"synthetic data")
    return None


def device_name(threads: int, cores: int, gpu: bool = False) -> str:
    if gpu:
        return "gpu:1"
    return "cpu" if threads == cores else f"cpu:{threads}"


def batch_of(w: Workload, args) -> int:
    """trainbench's rule: --batch, else the GPU batch on a GPU, else the workload's batch."""
    return args.batch or (w.gpu_batch if args.device == "cuda" else w.batch)


def optimizer_of(w: Workload, batch: int, args) -> Optimizer:
    """What trainbench trains the workload with at this batch under the same --optimizer and
    --lr (bench/plan/configs.cpp): the workload's own, its lr scaled with the batch where it has a
    reference batch; --optimizer changes the kind and resets lr to sgd 0.01, adam 0.001;
    --lr sets lr. Momentum, weight decay, betas and eps stay the workload's."""
    o = w.optimizer
    lr = o.lr * batch / o.lr_reference_batch if o.lr_reference_batch > 0 else o.lr
    kind = o.kind
    if args.optimizer:
        kind = args.optimizer
        lr = 1e-3 if kind == "adam" else 0.01
    if args.lr is not None:
        lr = args.lr
    return replace(o, kind=kind, lr=lr)


def variant_of(w: Workload, batch: int, args) -> str:
    """trainbench's variant (bench/plan/configs.cpp variant_of) for the flags the peer shares
    with it: the optimizer and learning rate where they differ from the workload's own, and
    data_on_device (the peer's data is always a pool of batches made before timing, on the GPU
    or in host memory). The peer's own settings are not part of it: they are in peer_settings."""
    own = optimizer_of(w, batch, SimpleNamespace(optimizer=None, lr=None))
    used = optimizer_of(w, batch, args)
    parts = []
    if used.kind != own.kind:
        parts.append(f"optimizer:{used.kind}")
    if used.lr != own.lr:
        parts.append(f"lr:{used.lr:g}")
    parts.append("data_on_device")
    return "/".join(parts)


def benchmark_name(w: Workload, device: str, batch: int, precision: str = "fp32",
                   variant: str = "") -> str:
    name = f"train/{w.model}/{w.dataset}/{device}/{precision}/bs:{batch}"
    return f"{name}/{variant}" if variant else name
