"""The parts of the PyTorch peer whose entry point is scripts/peers/pytorch_train.py, and the
names they all share. Imported with scripts/peers/ on sys.path, as pytorch_train.py puts it
there. Standard library only: the parts that import torch (models, data, session, timing,
machine, run) are imported only after the entry point's re-exec."""
from pathlib import Path

PROG = "pytorch_train.py"
ROOT = Path(__file__).resolve().parents[3]


class InputError(Exception):
    """Bad flags or files: one line on stderr, exit status 2."""


class CheckFailed(Exception):
    """A row that ran but must not count: loss not finite, or not falling."""
