"""scripts/peers/settings_search.py, the PyTorch peer's settings search of issue 20, without
torch: the grid it tries (both layouts for images, threads, BLAS threads, wait policies), the
choice it makes from trials (timing stubbed: the fastest, ties to the grid's first, failed
trials skipped), the environment a setting puts in force before torch loads, the settings file
it writes and reads back, and how a trial child's output is read."""
import json
import sys
from types import SimpleNamespace

import pytest

from conftest import SCRIPTS

sys.path.insert(0, str(SCRIPTS / "peers"))
import settings_search as ss  # noqa: E402
from settings_search import Setting, TrialResult  # noqa: E402


def stub_trials(rates: dict[str, float | None]):
    """A trial runner whose samples/s for a setting's text is rates[text] (None: it failed),
    and the list of the texts it was asked for, in order."""
    asked = []

    def run_trial(s: Setting) -> TrialResult:
        asked.append(s.text())
        rate = rates[s.text()]
        if rate is None:
            return TrialResult(s, None, error="exit status 1: RuntimeError: out of memory")
        return TrialResult(s, rate, steps=10, seconds=0.5)
    return run_trial, asked


# ---- the grid -------------------------------------------------------------------------------

def test_the_cpu_grid_of_an_image_model_tries_both_layouts_and_every_thread_setting():
    grid = ss.grid(images=True, threads=2, cuda=False)
    texts = [s.text() for s in grid]
    assert len(texts) == len(set(texts)) == 12
    assert {s.layout for s in grid} == {"nchw", "channels_last"}
    assert {(s.threads, s.blas_threads) for s in grid} == {(2, 2), (2, 1), (1, 1)}
    assert {s.omp_wait for s in grid} == {"active", "passive"}
    # The lead's best settings of the separate measurement are among them.
    assert "layout:channels_last/threads:2/blas_threads:1/omp_wait:passive" in texts
    assert texts[0] == "layout:nchw/threads:2/blas_threads:2/omp_wait:active"  # wins ties
    # The OpenMP OpenBLAS runs min(its threads, torch's): more BLAS threads would be a
    # duplicate under a false name.
    assert all(s.blas_threads <= s.threads for s in grid)


def test_the_cpu_grid_of_other_models_has_no_layout():
    grid = ss.grid(images=False, threads=2, cuda=False)
    assert len(grid) == 6 and all(s.layout is None for s in grid)
    assert "threads:2/blas_threads:1/omp_wait:passive" in [s.text() for s in grid]
    assert [s.text() for s in ss.grid(images=False, threads=1, cuda=False)] == [
        "threads:1/blas_threads:1/omp_wait:active", "threads:1/blas_threads:1/omp_wait:passive"]


def test_the_gpu_grid_is_the_layout_of_images():
    assert [s.text() for s in ss.grid(images=True, threads=16, cuda=True)] == [
        "layout:nchw", "layout:channels_last"]
    assert ss.grid(images=False, threads=16, cuda=True) == [Setting()]


# ---- the choice -----------------------------------------------------------------------------

@pytest.mark.parametrize("faster", ["nchw", "channels_last"])
def test_the_gpu_layout_is_the_faster_of_both(faster):
    slower = "channels_last" if faster == "nchw" else "nchw"
    run_trial, asked = stub_trials({f"layout:{faster}": 3545.0, f"layout:{slower}": 1837.0})
    lines = []
    chosen, trials = ss.search(ss.grid(True, 1, cuda=True), run_trial, lines.append)
    assert sorted(asked) == ["layout:channels_last", "layout:nchw"]  # both tried
    assert chosen == Setting(layout=faster)
    assert chosen.text() == f"layout:{faster}"  # what the row's peer_settings says
    assert [t.setting.layout for t in trials] == ["nchw", "channels_last"]
    assert any(f"chosen: layout:{faster}" in line for line in lines)
    assert sum("trial layout:" in line for line in lines) == 2  # each trial's figure logged


def test_the_cpu_choice_is_the_fastest_trial_of_the_grid():
    grid = ss.grid(images=True, threads=2, cuda=False)
    best = "layout:channels_last/threads:2/blas_threads:1/omp_wait:passive"
    rates = {s.text(): 100.0 + i for i, s in enumerate(grid)}  # the last would win...
    rates[best] = 1000.0                                         # ...but this one is fastest
    run_trial, asked = stub_trials(rates)
    chosen, trials = ss.search(grid, run_trial, lambda line: None)
    assert asked == [s.text() for s in grid]  # every setting tried once, in the grid's order
    assert chosen.text() == best
    assert [t.samples_per_s for t in trials] == [rates[s.text()] for s in grid]


def test_ties_go_to_the_first_and_failed_trials_never_win():
    grid = ss.grid(images=False, threads=2, cuda=False)
    rates = {s.text(): 50.0 for s in grid}
    rates[grid[0].text()] = None  # failed: cannot win however fast the others are
    chosen, trials = ss.search(grid, stub_trials(rates)[0], lambda line: None)
    assert chosen == grid[1]
    assert trials[0].samples_per_s is None and "out of memory" in trials[0].error


def test_when_every_trial_fails_the_first_setting_is_timed_to_report_the_error():
    grid = ss.grid(images=True, threads=1, cuda=True)
    lines = []
    chosen, trials = ss.search(grid, stub_trials({s.text(): None for s in grid})[0], lines.append)
    assert chosen == grid[0] and len(trials) == 2
    assert any("every trial failed" in line for line in lines)
    assert ss.choose(trials) is None


def test_one_setting_is_not_tried():
    run_trial, asked = stub_trials({})
    chosen, trials = ss.search([Setting()], run_trial, lambda line: None)
    assert chosen == Setting() and trials == [] and asked == []


# ---- settings as text and environment -------------------------------------------------------

def test_a_setting_reads_back_from_its_text():
    for s in ss.grid(True, 2, False) + ss.grid(False, 2, False) + ss.grid(True, 2, True):
        assert ss.parse(s.text(), cuda=s.threads is None) == s
    assert ss.parse("omp_wait:passive/layout:channels_last", False) == Setting(
        layout="channels_last", omp_wait="passive")


@pytest.mark.parametrize("text, cuda, why", [
    ("layout:nhwc", False, "the layout is nchw or channels_last"),
    ("threads:0", False, "not a whole number"),
    ("omp_wait:spin", False, "active, passive or default"),
    ("cores:2", False, "unknown field"),
    ("threads:1/threads:2", False, "repeated"),
    ("threads:2/layout:nchw", True, "on a GPU only the layout"),
])
def test_a_bad_setting_says_what_is_wrong(text, cuda, why):
    with pytest.raises(ValueError, match=why):
        ss.parse(text, cuda)


def test_resolved_fills_in_what_a_run_applies():
    assert ss.resolved(Setting(), images=True, threads=2, cuda=False).text() == \
        "layout:nchw/threads:2/blas_threads:2/omp_wait:default"
    assert ss.resolved(Setting(threads=1), images=False, threads=2, cuda=False).text() == \
        "threads:1/blas_threads:1/omp_wait:default"
    assert ss.resolved(Setting(layout="channels_last"), images=False, threads=2, cuda=False).layout is None
    assert ss.resolved(Setting(layout="channels_last"), images=True, threads=8, cuda=True).text() == \
        "layout:channels_last"


def test_the_environment_of_a_setting():
    base = {"OMP_WAIT_POLICY": "ACTIVE", "OPENBLAS_CORETYPE": "Haswell", "PATH": "/bin"}
    env = ss.environment(Setting(None, 2, 1, "passive"), base)
    assert env["OMP_WAIT_POLICY"] == "PASSIVE" and env["OPENBLAS_NUM_THREADS"] == "1"
    assert env["OPENBLAS_CORETYPE"] == "Haswell" and env["PATH"] == "/bin"  # the rest untouched
    assert "OMP_WAIT_POLICY" not in ss.environment(Setting(None, 2, 2, "default"), base)
    assert base["OMP_WAIT_POLICY"] == "ACTIVE"  # a copy


# ---- trial output and the settings file -----------------------------------------------------

def test_a_trial_child_s_output_is_read():
    s = Setting(layout="nchw")
    good = ss.parse_trial_output(s, 0, "noise\n" + ss.TRIAL_PREFIX +
                                 json.dumps({"samples_per_s": 1234.5, "steps": 7, "seconds": 0.56}), "")
    assert (good.samples_per_s, good.steps, good.seconds, good.error) == (1234.5, 7, 0.56, "")
    bad = ss.parse_trial_output(s, 1, "", "Traceback...\nRuntimeError: CUDA out of memory\n")
    assert bad.samples_per_s is None
    assert bad.error == "exit status 1: RuntimeError: CUDA out of memory"


def test_the_settings_file_keeps_each_benchmark_s_choice_and_trials(tmp_path):
    path = str(tmp_path / "settings.json")
    a = ss.grid(True, 2, False)
    trials = [TrialResult(a[0], 10.0, 3, 0.5), TrialResult(a[1], None, error="boom")]
    ss.write_choice(path, "train/lenet5/cifar10/cpu/fp32/bs:100", a[1], trials)
    ss.write_choice(path, "train/mlp/mnist/cpu/fp32/bs:100", Setting(None, 2, 1, "passive"), [])
    choices = ss.read_choices(path, cuda=False)
    assert choices == {"train/lenet5/cifar10/cpu/fp32/bs:100": a[1],
                       "train/mlp/mnist/cpu/fp32/bs:100": Setting(None, 2, 1, "passive")}
    doc = json.loads((tmp_path / "settings.json").read_text())
    assert doc["benchmarks"]["train/lenet5/cifar10/cpu/fp32/bs:100"]["trials"][1]["error"] == "boom"
    (tmp_path / "bad.json").write_text('{"format": 1, "benchmarks": {"x": {"settings": "layout:nhwc"}}}')
    with pytest.raises(ValueError, match="layout"):
        ss.read_choices(str(tmp_path / "bad.json"), cuda=False)
    with pytest.raises(ValueError, match="cannot read it"):
        ss.read_choices(str(tmp_path / "missing.json"), cuda=False)


def test_run_each_searches_what_the_file_lacks_and_times_the_choice(tmp_path, monkeypatch):
    """--settings @FILE: a benchmark in the file runs its setting unsearched; one it lacks is
    searched (all its settings tried), written to --settings_out, then timed under the fastest."""
    images = SimpleNamespace(input_shape=(3, 32, 32), seq_len=0, warmup_steps=200)
    vector = SimpleNamespace(input_shape=(784,), seq_len=0, warmup_steps=2)
    known, unknown = "train/mlp/mnist/cpu/fp32/bs:100", "train/lenet5/cifar10/cpu/fp32/bs:100"
    path = str(tmp_path / "settings.json")
    ss.write_choice(path, known, Setting(None, 1, 1, "passive"), [])
    rates = {s.text(): 1.0 for s in ss.grid(True, 2, False)}
    rates["layout:channels_last/threads:2/blas_threads:1/omp_wait:active"] = 9.0
    run_trial, asked = stub_trials(rates)
    timed = []
    monkeypatch.setattr(ss, "trial_runner", lambda *a: run_trial)
    monkeypatch.setattr(ss, "timed_child", lambda script, args, p, name, s: timed.append((name, s.text())) or 0)
    args = SimpleNamespace(settings="@" + path, settings_out=path, search_only=False, device="cpu",
                           threads=2, trial_time=0.5)
    status = ss.run_each(SCRIPTS / "peers" / "pytorch_train.py", args,
                         [((vector, "fp32"), known), ((images, "fp32"), unknown)], lambda line: None)
    assert status == 0
    assert len(asked) == 12  # only the unknown one searched
    assert timed == [(known, "threads:1/blas_threads:1/omp_wait:passive"),
                     (unknown, "layout:channels_last/threads:2/blas_threads:1/omp_wait:active")]
    assert ss.read_choices(path, cuda=False)[unknown].layout == "channels_last"
