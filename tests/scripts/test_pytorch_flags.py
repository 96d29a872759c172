"""scripts/peers/pytorch_train.py before it imports torch (so these run without PyTorch): its
flags, the GPU mode's device, precisions and benchmark names, and what it reads from the
trainbench binary (`--list_models --json`, `--csv_header --json`), here a fake one written by
the test: the workloads come from its JSON, a model with no PyTorch definition is skipped with a
note, and a missing, old or broken binary is refused in one line naming it and the fix; and
bad flags or a CSV with another header answer in one line, the CSV untouched; a trainbench whose
schema lacks the columns the peer fills is too old, and one whose schema is not the JSON the peer
reads is named; the settings flags (--settings, --settings_out,
--search_only) refuse what cannot run; the parts the script runs before its re-exec do not
load torch.

fake_trainbench() and TODAY are also used by test_pytorch_train.py."""
import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import SCRIPTS

PEER = SCRIPTS / "peers" / "pytorch_train.py"

# A short header: enough for the peer to write rows by column name (the columns of schemas 4 to 6
# it fills included).
FAKE_HEADER = ("schema_version,benchmark,kind,model,dataset,device,precision,batch,optimizer,"
               "framework,run_type,repetition,status,message,params,train_flops_per_sample,"
               "step_time_s,wall_step_time_s,samples_per_s,variant,load_avg_1m,measurement,"
               "peer_settings,device_step_time_s,device_samples_per_s,device_kind,backend,"
               "data_parallel,verdicts")
FAKE_SCHEMA_VERSION = "7"  # what the fake says it writes, unless a test gives another


def workload(model, dataset, batch, input_shape, classes, params, forward_flops, optimizer,
             input_flops=0, **more) -> dict:
    """One entry of `trainbench --list_models --json` (format 1). Training FLOPs are 3 x the
    forward's less input_flops, the input gradient of the layers fed by the model's input."""
    entry = {"model": model, "dataset": dataset,
             "task": "classification" if classes else "regression", "classes": classes,
             "input_shape": list(input_shape), "seq_len": 0, "batch": batch, "gpu_batch": batch,
             "warmup_steps": 2, "epochs": 1, "real_data_only": False,
             "optimizer": {"kind": "sgd", "lr": 0.01, "momentum": 0.9, "weight_decay": 0.0,
                           "beta1": 0.9, "beta2": 0.999, "eps": 1e-08, "lr_reference_batch": 0,
                           **optimizer},
             "params": params, "forward_flops_per_sample": float(forward_flops),
             "train_flops_per_sample": 3.0 * forward_flops - input_flops}
    entry.update(more)
    return entry


ADAM = {"kind": "adam", "lr": 0.001}
RESNET_SGD = {"kind": "sgd", "lr": 0.1, "weight_decay": 0.0001, "lr_reference_batch": 256}
# trainbench's workloads as models/ defines them today, with their counts (results/SCHEMA.md).
TODAY = [
    workload("mlp", "mnist", 100, [784], 10, 1796010, 3588000, ADAM, 1568000, epochs=5),
    workload("mlp", "fashion-mnist", 100, [784], 10, 1796010, 3588000, ADAM, 1568000, epochs=5,
             real_data_only=True),
    workload("lenet5", "cifar10", 100, [3, 32, 32], 10, 74966, 1513680, ADAM, 705600, epochs=5,
             warmup_steps=200),
    workload("lstm", "sine", 20, [1], 0, 236, 14700, {"kind": "adam", "lr": 0.01}, 350, seq_len=35,
             epochs=20),
    workload("resnet152", "cifar10", 128, [3, 32, 32], 10, 58164298, 469901312, RESNET_SGD, 4816896),
    workload("resnet152", "imagenet", 8, [3, 224, 224], 1000, 60192808, 23027253248, RESNET_SGD,
             236027904, gpu_batch=128),
]
# A model trainbench might add that the peer has no PyTorch definition of.
FIFTH = workload("toymodel", "blobs", 16, [8], 4, 40, 64, ADAM)


def fake_trainbench(folder: Path, workloads=None, *, listing: str | None = None,
                    header: str = FAKE_HEADER, schema_version: str | None = FAKE_SCHEMA_VERSION,
                    schema: str | None = None) -> Path:
    """An executable that answers as trainbench does: --csv_header prints `header`, and
    --csv_header --json `schema`, by default the JSON of schema_version and header's columns
    (schema_version None: it refuses --json there, as a trainbench older than that flag does);
    --list_models (with or without --json) prints `listing`, by default the JSON of `workloads`
    (TODAY unless given)."""
    if listing is None:
        listing = json.dumps({"format": 1, "workloads": TODAY if workloads is None else workloads})
    if schema is None and schema_version is not None:
        schema = json.dumps({"schema_version": schema_version, "columns": header.split(",")})
    path = folder / "trainbench"
    path.write_text(f"""#!{sys.executable}
import sys
args = sys.argv[1:]
if args == ["--csv_header"]:
    print({header!r})
elif args == ["--csv_header", "--json"] and {schema!r} is not None:
    print({schema!r})
elif "--list_models" in args:
    sys.stdout.write({listing!r})
elif "--json" in args:
    print("trainbench: error: --json goes with --list_models or --list_configs (trainbench "
          "--list_models --json); results go to --csv=FILE", file=sys.stderr)
    sys.exit(2)
else:
    print(f"trainbench: error: unknown flag '{{args[-1]}}' (see trainbench --help)", file=sys.stderr)
    sys.exit(2)
""")
    path.chmod(0o755)
    return path


def run(*args, env=None):
    environment = {k: v for k, v in os.environ.items() if k != "TRAINBENCH"}
    environment.update(env or {})
    return subprocess.run([sys.executable, str(PEER), *map(str, args)], capture_output=True,
                          text=True, timeout=120, env=environment)


def one_line(r) -> str:
    """The single line of an error that exits 2 before anything runs."""
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and r.stdout == "", (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    return lines[0]


def test_bad_flags_answer_in_one_line(tmp_path):
    binary = fake_trainbench(tmp_path)
    for args in (["--filter", "no-such-model"], ["--threads", "0"], ["--optimizer", "lbfgs"],
                 ["--lr", "-1"]):
        assert args[0] in one_line(run(*args, "--trainbench", binary)), args


@pytest.mark.parametrize("header", ["a,b,c", "trainbench-minus-one"])
def test_refuses_a_csv_with_another_header(tmp_path, header):
    if header == "trainbench-minus-one":
        header = FAKE_HEADER.rsplit(",", 1)[0]  # another trainbench schema
    path = tmp_path / "other.csv"
    path.write_text(header + "\n")
    line = one_line(run("--filter", "lstm", "--csv", path, "--trainbench", fake_trainbench(tmp_path)))
    assert "Nothing was written" in line
    assert path.read_text() == header + "\n"


def test_the_cpu_runs_fp32_only():
    r = run("--precisions=bf16")
    assert r.returncode == 2
    assert "the CPU runs fp32 only" in r.stderr


def test_an_unknown_precision_is_named():
    r = run("--device=cuda", "--precisions=fp32,fp8")
    assert r.returncode == 2
    assert "unknown precision 'fp8'" in r.stderr


def test_gpu_names_carry_the_precision_and_the_gpu_batch(tmp_path):
    # A filter that matches nothing lists every name it would have run. The peer's data is
    # resident on the GPU: its rows carry trainbench's data_on_device variant.
    r = run("--device=cuda", "--filter=no-such-benchmark", "--trainbench", fake_trainbench(tmp_path))
    message = one_line(r)
    for precision in ("fp32", "tf32", "fp16", "bf16"):
        assert f"train/resnet152/imagenet/gpu:1/{precision}/bs:128/data_on_device" in message
        assert f"train/mlp/mnist/gpu:1/{precision}/bs:100/data_on_device" in message
    assert "/cpu" not in message


@pytest.mark.parametrize("flags, variant", [
    ([], "/data_on_device"),
    (["--optimizer=adam"], "/data_on_device"),       # the MLP's own optimizer and lr
    (["--optimizer=sgd"], "/optimizer:sgd/lr:0.01/data_on_device"),
    (["--lr=0.5"], "/lr:0.5/data_on_device"),
    (["--optimizer=sgd", "--lr=0.001"], "/optimizer:sgd/data_on_device"),
])
def test_names_carry_trainbench_s_variant_of_the_same_flags(tmp_path, flags, variant):
    """bench/plan/configs.cpp variant_of: what differs from the workload's own optimizer and lr, and
    data_on_device (the peer's pool of batches), so that a peer row matches the trainbench row of
    the same flags."""
    message = one_line(run("--threads=1", "--filter=no-such-benchmark", *flags,
                           "--trainbench", fake_trainbench(tmp_path)))
    device = "cpu" if len(os.sched_getaffinity(0)) == 1 else "cpu:1"
    names = message.split(" they are ", 1)[1].split(", ")
    assert f"train/mlp/mnist/{device}/fp32/bs:100{variant}" in names


@pytest.mark.parametrize("args, needle", [
    (["--settings=layout:nhwc"], "--settings: 'layout:nhwc': the layout is nchw or channels_last"),
    (["--settings=threads:4", "--threads=2"], "threads:4 is more than --threads 2"),
    (["--device=cuda", "--settings=threads:2"], "on a GPU only the layout"),
    (["--search_only"], "--search_only: needs --settings search (the default) and --settings_out"),
    (["--trial_time=0"], "--trial_time: 0.0 is not a number of seconds > 0"),
    (["--trial"], "--trial: needs one --settings SETTING"),
])
def test_bad_settings_flags_answer_in_one_line(tmp_path, args, needle):
    assert needle in one_line(run("--filter=lstm", *args, "--trainbench", fake_trainbench(tmp_path)))


def test_a_settings_file_that_cannot_be_read_is_named(tmp_path):
    binary = fake_trainbench(tmp_path)
    missing = tmp_path / "no-settings.json"
    assert f"--settings @{missing}: cannot read it" in one_line(
        run("--filter=lstm", f"--settings=@{missing}", "--trainbench", binary))
    other = tmp_path / "other.json"
    other.write_text('{"format": 7}')
    assert "not a settings file of format 1" in one_line(
        run("--filter=lstm", f"--settings=@{other}", "--trainbench", binary))


def test_a_trainbench_without_the_columns_the_peer_fills_is_too_old(tmp_path):
    v3 = FAKE_HEADER.replace(",variant,load_avg_1m,measurement,peer_settings", "")
    binary = fake_trainbench(tmp_path, header=v3, schema_version="3")
    line = one_line(run("--filter=lstm", "--trainbench", binary))
    assert f"{binary} --csv_header --json: schema 3 has no" in line
    assert "variant, load_avg_1m, measurement, peer_settings column(s)" in line
    assert "older than schema 6" in line and "cmake --build build/release" in line


@pytest.mark.parametrize("schema, why", [
    ("schema_version,benchmark", "Expecting value"),  # the CSV header, not JSON
    (json.dumps({"columns": FAKE_HEADER.split(",")}), "has no 'schema_version'"),
    (json.dumps({"schema_version": 7, "columns": FAKE_HEADER.split(",")}), "schema_version is 7, not a string"),
    (json.dumps({"schema_version": "", "columns": FAKE_HEADER.split(",")}), "an empty schema_version"),
    (json.dumps({"schema_version": "7", "columns": FAKE_HEADER}), "columns is \"schema_version"),
    (json.dumps({"schema_version": "7", "columns": FAKE_HEADER.split(",")[1:]}),
     "not a list of names starting with schema_version"),
])
def test_a_schema_the_peer_cannot_read_names_the_binary(tmp_path, schema, why):
    binary = fake_trainbench(tmp_path, schema=schema)
    line = one_line(run("--filter=lstm", "--trainbench", binary))
    assert f"{binary} --csv_header --json: not the schema this script reads" in line, line
    assert why in line and "cmake --build build/release" in line, line


def test_the_names_come_from_the_json(tmp_path):
    changed = copy.deepcopy(TODAY) + [FIFTH]
    changed[0]["batch"] = changed[0]["gpu_batch"] = 64         # mlp/mnist
    changed[5]["gpu_batch"] = 96                                # resnet152/imagenet on a GPU
    binary = fake_trainbench(tmp_path, changed)
    message = one_line(run("--threads=1", "--filter=no-such-benchmark", "--trainbench", binary))
    names = message.split(" they are ", 1)[1].split(", ")
    device = "cpu" if len(os.sched_getaffinity(0)) == 1 else "cpu:1"
    # Every peer row carries data_on_device: its batches are a pool made before timing.
    assert names == [f"train/{w['model']}/{w['dataset']}/{device}/fp32/bs:{w['batch']}/data_on_device"
                     for w in changed]
    assert f"train/mlp/mnist/{device}/fp32/bs:64/data_on_device" in names
    assert f"train/toymodel/blobs/{device}/fp32/bs:16/data_on_device" in names
    gpu = one_line(run("--device=cuda", "--precisions=fp32", "--filter=no-such-benchmark",
                       "--trainbench", binary))
    assert "train/resnet152/imagenet/gpu:1/fp32/bs:96" in gpu
    # --batch sets every workload's batch, as trainbench --batch does.
    batch = one_line(run("--threads=1", "--batch=7", "--filter=no-such-benchmark", "--trainbench", binary))
    assert all(name.endswith("/bs:7/data_on_device") for name in batch.split(" they are ", 1)[1].split(", "))


def test_trainbench_comes_from_the_environment(tmp_path):
    binary = fake_trainbench(tmp_path, TODAY + [FIFTH])
    r = run("--filter=train/toymodel/", env={"TRAINBENCH": str(binary)})
    assert r.returncode == 0, r.stderr
    assert "toymodel" in r.stderr


def test_a_model_without_a_pytorch_definition_is_skipped_with_a_note(tmp_path):
    """Its benchmarks are named on one line that says why; nothing fails, and nothing else
    runs when the filter matched only them (torch is never loaded)."""
    binary = fake_trainbench(tmp_path, TODAY + [FIFTH])
    out = tmp_path / "rows.csv"
    r = run("--device=cuda", "--filter=train/toymodel/", "--trainbench", binary, "--csv", out)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "" and "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "no PyTorch definition of model 'toymodel'" in lines[0]
    for precision in ("fp32", "tf32", "fp16", "bf16"):
        assert f"train/toymodel/blobs/gpu:1/{precision}/bs:16" in lines[0]
    assert not out.exists()


def test_a_real_data_only_workload_is_skipped_with_a_note(tmp_path):
    r = run("--threads=1", "--filter=fashion", "--trainbench", fake_trainbench(tmp_path))
    assert r.returncode == 0, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "train/mlp/fashion-mnist/" in lines[0], r.stderr
    assert "real data only" in lines[0]


def test_a_missing_binary_is_named_with_the_fix(tmp_path):
    missing = tmp_path / "build" / "trainbench"
    for args, env in ((["--trainbench", missing], None), ([], {"TRAINBENCH": str(missing)})):
        for mode in ([], ["--list_models"]):
            line = one_line(run(*args, *mode, env=env))
            assert str(missing) in line
            assert "cmake --build build/release" in line and "--trainbench PATH" in line
            assert "$TRAINBENCH" in line


def test_a_trainbench_without_json_is_too_old(tmp_path):
    # An older trainbench takes --json as nothing and prints its table.
    table = ("model      dataset    batch       params fwd GFLOP/sample train GFLOP/step\n"
             "mlp        mnist        100      1796010         0.003588           1.0764\n")
    old = fake_trainbench(tmp_path, listing=table)
    line = one_line(run("--trainbench", old))
    assert str(old) in line and "--json" in line and "cmake --build build/release" in line


def test_a_trainbench_that_refuses_a_flag_is_too_old(tmp_path):
    # A trainbench before `--csv_header --json` refuses --json with anything but the listings.
    old = fake_trainbench(tmp_path, schema_version=None)
    line = one_line(run("--filter=mlp/mnist", "--trainbench", old))
    assert f"{old} --csv_header --json exited with status 2" in line
    assert "--json goes with --list_models or --list_configs" in line
    assert "a trainbench older than --csv_header --json" in line and "cmake --build build/release" in line


def test_malformed_json_names_the_binary(tmp_path):
    no_params = copy.deepcopy(TODAY)
    del no_params[2]["params"]
    bad_kind = copy.deepcopy(TODAY)
    bad_kind[4]["optimizer"]["kind"] = "lamb"
    cases = {
        '{"format": 1, "workloads": [': "Expecting",
        json.dumps({"format": 2, "workloads": TODAY}): "format 2",
        json.dumps({"format": 1, "workloads": []}): "no list of workloads",
        json.dumps({"format": 1, "workloads": no_params}): "workload lenet5/cifar10 has no 'params'",
        json.dumps({"format": 1, "workloads": bad_kind}): "optimizer kind 'lamb'",
    }
    for i, (listing, why) in enumerate(cases.items()):
        folder = tmp_path / str(i)
        folder.mkdir()
        binary = fake_trainbench(folder, listing=listing)
        line = one_line(run("--trainbench", binary))
        assert f"{binary} --list_models --json" in line and why in line, line


def test_the_parts_before_the_re_exec_do_not_load_torch():
    """The entry point and the parts it runs before its re-exec (flags, trainbench's answers,
    the environment, the CSV, the settings search) import without torch: torch must load only
    in the re-executed process, under the environment the re-exec put in force."""
    code = ("import importlib.util, sys\n"
            "sys.path.insert(0, sys.argv[1])\n"
            "import settings_search, torchpeer.cli, torchpeer.csvout, torchpeer.environment\n"
            "import torchpeer.trainbench, torchpeer.workloads\n"
            "spec = importlib.util.spec_from_file_location('entry', sys.argv[2])\n"
            "spec.loader.exec_module(importlib.util.module_from_spec(spec))\n"
            "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))\n")
    r = subprocess.run([sys.executable, "-c", code, str(PEER.parent), str(PEER)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]", r.stdout
