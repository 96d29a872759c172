"""scripts/peers/pytorch_train.py's flags, which it checks before importing torch (so these run
without PyTorch): the GPU mode's device, precisions and benchmark names."""
import subprocess
import sys

from conftest import SCRIPTS

PEER = SCRIPTS / "peers" / "pytorch_train.py"


def run(*args):
    return subprocess.run([sys.executable, str(PEER), *args], capture_output=True, text=True, timeout=120)


def test_the_cpu_runs_fp32_only():
    r = run("--precisions=bf16")
    assert r.returncode == 2
    assert "the CPU runs fp32 only" in r.stderr


def test_an_unknown_precision_is_named():
    r = run("--device=cuda", "--precisions=fp32,fp8")
    assert r.returncode == 2
    assert "unknown precision 'fp8'" in r.stderr


def test_gpu_names_carry_the_precision_and_the_gpu_batch():
    # A filter that matches nothing lists every name it would have run.
    r = run("--device=cuda", "--filter=no-such-benchmark")
    assert r.returncode == 2
    for precision in ("fp32", "tf32", "fp16", "bf16"):
        assert f"train/resnet152/imagenet/gpu:1/{precision}/bs:128" in r.stderr
        assert f"train/mlp/mnist/gpu:1/{precision}/bs:100" in r.stderr
    assert "/cpu" not in r.stderr
