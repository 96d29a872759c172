"""The parts of the PyTorch peer whose entry point is scripts/peers/pytorch_train.py, and the
names they all share. Imported with scripts/peers/ on sys.path, as pytorch_train.py puts it
there. Standard library only: the parts that import torch (models, data, session, timing,
machine, run) are imported only after the entry point's re-exec. Where trainbench's files lie
(a checkout, or an installed prefix) comes from tbprefix.py, two folders up."""
import sys
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[2]  # scripts/, or <prefix>/libexec/trainbench/
if str(SCRIPTS) not in sys.path:
    sys.path.append(str(SCRIPTS))
import tbprefix  # noqa: E402

PROG = "pytorch_train.py"
ROOT = SCRIPTS.parent  # the checkout (where not installed)


class InputError(Exception):
    """Bad flags or files: one line on stderr, exit status 2."""


class CheckFailed(Exception):
    """A row that ran but must not count: loss not finite, or not falling."""
