"""scripts/emulate_nodes.sh: ranks as emulated nodes of this machine. CPU mode: one rank per
network namespace, each its own host, joined by a veth pair (a bridge for more than two) shaped
with tc's tbf, Open MPI over TCP only; trainbench's MLP at 1 and 10 Gbit/s sends its all-reduces
over the shaped link, measures it below the shaped rate, and prints its measured mpi:2 row beside
the prediction (where the figure lands is the benchmark's business, scripts/check_predictions.sh,
not this test's). GPU mode: each rank its own NCCL host id on GPU 0; without a GPU its rows are
skipped with the reason, and nothing hangs. Every run, failed or interrupted ones too, must leave
no namespace, link, process or file behind. A machine that cannot run emulated nodes is told
apart: the script exits 2 with one line saying what is missing (a chroot whose '/' is not a mount
point is tried here). Needs root (namespaces); the CPU tests are skipped, with the script's reason,
only where `emulate_nodes.sh --check` finds the machine lacking (a container without
CAP_NET_ADMIN, say). The binary comes from $TRAINBENCH (ctest)."""
import csv
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from processes import marked_processes

BINARY = os.environ.get("TRAINBENCH", "build/release/bench/trainbench")
SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "emulate_nodes.sh"
MLP = ["--benchmark_filter=^train/mlp/mnist/", "--iterations=10"]
# What each rank says about itself: rank, node-local rank, host, network namespace, environment.
PROBE = ("echo rank=$OMPI_COMM_WORLD_RANK local=$OMPI_COMM_WORLD_LOCAL_RANK host=$(hostname) "
         "net=$(readlink /proc/self/ns/net) emulated=$TB_EMULATED_NODES hostid=$NCCL_HOSTID "
         "ifname=$NCCL_SOCKET_IFNAME ib=$NCCL_IB_DISABLE gpu=$CUDA_VISIBLE_DEVICES "
         "addr=$(ip -o -4 addr show tbnet 2>/dev/null | awk '{print $4}')")

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="network and UTS namespaces need root")


def namespaces():
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def sleeping_in(namespace):
    pids = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True).stdout.split()
    for pid in pids:
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip() == "sleep":
                return True
        except OSError:
            continue
    return False


def marked(run_id):
    """Processes of one run of the script (it marks them with TB_EMULATE_RUN=tbemu<its pid>)."""
    return marked_processes("TB_EMULATE_RUN", run_id)


def leftovers(pid):
    """What is left of the run of the script with process id `pid`: its namespaces, links (in
    this namespace), processes and files. Other runs on the machine are no concern of this test."""
    run_id = f"tbemu{pid}"
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=True).stdout
    return {
        "namespaces": sorted(n for n in namespaces() if n.startswith(f"{run_id}-")),
        "links": re.findall(rf"^\d+: (te{pid}[ab]\d+)[@:]", links, re.M),
        "processes": marked(run_id),
        "files": [str(p) for p in Path(os.environ.get("TMPDIR", "/tmp")).glob(f"{run_id}.*")],
    }


@pytest.fixture(scope="module")
def cpu_nodes():
    """This machine can run CPU ranks as emulated nodes (3 nodes: a bridge; tbf); else the CPU
    tests are skipped with the script's one-line reason."""
    if not shutil.which("ip") or not shutil.which("tc"):
        pytest.fail("ip and tc not found: install iproute2 (scripts/test.sh installs it)")
    r = subprocess.run([str(SCRIPT), "--check", "--nodes", "3", "--rate", "1gbit"], capture_output=True, text=True,
                       timeout=60)
    if r.returncode == 2 and "this machine cannot run emulated nodes" in r.stderr:
        pytest.skip(r.stderr.strip().splitlines()[-1])
    assert r.returncode == 0 and "this machine can run 3 CPU ranks as emulated nodes" in r.stderr, r.stderr


@pytest.fixture
def runs():
    """The process ids of the script's runs in a test; afterwards (failed or not), nothing of
    them may be left."""
    if not shutil.which("ip") or not shutil.which("tc"):
        pytest.fail("ip and tc not found: install iproute2 (scripts/test.sh installs it)")
    pids = []
    yield pids
    assert pids, "the test ran the script no time"
    left = {pid: leftovers(pid) for pid in pids}
    assert not any(any(v.values()) for v in left.values()), f"left behind: {left}"


def start_script(runs, args):
    p = subprocess.Popen([str(SCRIPT), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    runs.append(p.pid)
    return p


def run_script(runs, args, timeout=180):
    """The script with `args`; past `timeout` it is sent SIGTERM (so it cleans up) and fails."""
    p = start_script(runs, args)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=60)
        pytest.fail(f"emulate_nodes.sh {' '.join(args)} ran past {timeout} s:\n{out}\n{err}")
    return p.returncode, out, err


def probes(out):
    """The PROBE lines of the ranks, by rank."""
    ranks = {}
    for line in out.splitlines():
        if line.startswith("rank="):
            fields = dict(f.split("=", 1) for f in line.split(" "))
            ranks[int(fields["rank"])] = fields
    return ranks


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize("nodes", [2, 3])
def test_each_rank_is_a_host_of_its_own_on_the_link(cpu_nodes, runs, nodes):
    status, out, err = run_script(runs, ["--nodes", str(nodes), "--rate", "1gbit", "--", "sh", "-c", PROBE], timeout=120)
    assert status == 0, err
    ranks = probes(out)
    assert sorted(ranks) == list(range(nodes)), out
    own_net = os.readlink("/proc/self/ns/net")
    for k, r in ranks.items():
        assert r["host"] == f"tb-emulated-node-{k}" and r["local"] == "0", r
        assert r["emulated"] == str(nodes) and r["addr"] == f"10.213.0.{k + 1}/24", r
    nets = {r["net"] for r in ranks.values()}
    assert len(nets) == nodes and own_net not in nets
    link = "a veth pair" if nodes == 2 else "a bridge"
    assert f"joined by {link} (10.213.0.0/24) shaped to 1gbit (tbf)" in err, err


@pytest.mark.parametrize("rate,packet", [("1gbit", 16384), ("10gbit", 65536)])
def test_the_link_is_a_wire_at_its_rate_not_a_bucket_of_credit(cpu_nodes, runs, rate, packet):
    """Each node's packets are cut to about 100 us of the rate (16 to 64 KiB) and tbf's bucket
    holds two of them, its queue 20 ms: an all-reduce after a pause gets no head start (a bucket of
    128 KiB sent 321 KB in 1.8 ms at 1 Gbit/s, where the rate allows 2.6)."""
    show = "tc qdisc show dev tbnet; ip -d link show tbnet | grep -o 'gso_max_size [0-9]*'"
    status, out, err = run_script(runs, ["--nodes", "3", "--rate", rate, "--", "sh", "-c", show], timeout=120)
    assert status == 0, err
    assert re.findall(r"gso_max_size (\d+)", out) == [str(packet)] * 3, out
    qdiscs = re.findall(r"qdisc tbf \S+ root .*rate (\S+) burst (\d+)(b|Kb|Mb) lat (\S+)", out)
    assert len(qdiscs) == 3, out
    for shown_rate, burst, unit, latency in qdiscs:
        assert shown_rate.lower() == rate and latency == "20ms", out
        # tc shows the bucket as it rounded it to its clock: within 1% of two packets.
        assert abs(int(burst) * {"b": 1, "Kb": 1024, "Mb": 1 << 20}[unit] - 2 * packet) <= 0.01 * 2 * packet, out


def test_two_ranks_per_node_share_a_host_and_its_memory(cpu_nodes, runs):
    """--ranks-per-node: the second level. Consecutive ranks share a host (node-local ranks 0 and
    1), its network namespace and its address; Open MPI adds shared memory (vader) for them."""
    status, out, err = run_script(runs, ["--nodes", "2", "--ranks-per-node", "2", "--rate", "1gbit", "--", "sh", "-c",
                                         PROBE], timeout=120)
    assert status == 0, err
    ranks = probes(out)
    assert sorted(ranks) == [0, 1, 2, 3], out
    for k, r in ranks.items():
        assert r["host"] == f"tb-emulated-node-{k // 2}" and r["local"] == str(k % 2), r
        assert r["emulated"] == "2" and r["addr"] == f"10.213.0.{k // 2 + 1}/24", r
    assert ranks[0]["net"] == ranks[1]["net"] != ranks[2]["net"] == ranks[3]["net"]
    assert "2 ranks each, shared memory between them" in err, err
    bad, _, why = run_script(runs, ["--nodes", "2", "--ranks-per-node", "0", "--", "true"], timeout=60)
    assert bad == 2 and "--ranks-per-node: '0'" in why, why


def test_mlp_over_links_shaped_to_1_and_10_gbit(cpu_nodes, runs, tmp_path):
    measured = {}
    rows_at = {}
    for rate in ("1gbit", "10gbit"):
        csv_path = tmp_path / f"{rate}.csv"
        status, out, err = run_script(runs, ["--nodes", "2", "--rate", rate, "--", BINARY, "--devices=cpu:1,mpi:2",
                                       "--link=measured", *MLP, f"--csv={csv_path}"])
        assert status == 0, err
        # The ranks' all-reduces crossed the shaped link (a 16 MiB all-reduce alone is 7 x 8 MiB
        # or more each way), not shared memory.
        for k in (0, 1):
            sent = re.search(rf"tb-emulated-node-{k} sent (\d+) bytes over its link \(tbf {rate}\)", err)
            assert sent and int(sent.group(1)) > 50e6, err
        busbw = re.search(r"predicted mpi:2 over measured \(([0-9.]+) GB/s", out + err)
        assert busbw, out + err
        rows = read_csv(csv_path)
        rows_at[rate] = rows
        one = [r for r in rows if r["device"] == "cpu:1"]
        mpi = [r for r in rows if r["device"] == "mpi:2" and r["measurement"] == "measured"]
        predicted = [r for r in rows if r["device"] == "mpi:2" and r["measurement"] == "predicted"]
        assert len(one) == 1 and len(mpi) == 1 and len(predicted) == 1, [r["benchmark"] for r in rows]
        for r in rows:
            assert r["status"] == "ok", (r["benchmark"], r["message"])
            assert r["ranks"] == "2" and r["host"] == "tb-emulated-node-0", (r["ranks"], r["host"])
        assert mpi[0]["replicas"] == "2" and float(mpi[0]["samples_per_s"]) > 0
        assert float(mpi[0]["loss_last"]) < float(mpi[0]["loss_first"])
        assert predicted[0]["link"] == "measured"
        assert_compared_with_its_prediction(out, mpi[0], predicted[0])
        measured[rate] = float(predicted[0]["link_busbw_gbps"])
        assert abs(measured[rate] - float(busbw.group(1))) <= 0.01 * measured[rate] + 1e-3
    # The shaping holds: the link measured at 1 Gbit/s (0.125 GB/s) is below it, which a slow or
    # busy machine cannot break; how fast each link is is not this test's business.
    assert 0 < measured["1gbit"] < 0.125, measured
    assert measured["10gbit"] > 0, measured
    # Schema 5: two hosts, each rank node-local rank 0 on its own; the rows of both ranks marked
    # as emulated nodes, saying so.
    for rows in rows_at.values():
        assert_two_emulated_hosts(rows, "mpi:2")


def assert_compared_with_its_prediction(out, measured, predicted):
    """The console's line for the measured row names its prediction (figure, band, source row), the
    ratio between them, and says inside or outside the band as the rows' figures do. The machinery,
    not where the figure lands: a busy machine may put it anywhere."""
    got = float(measured["samples_per_s"])
    point, low, high = (float(predicted[c]) for c in ("samples_per_s", "samples_per_s_low", "samples_per_s_high"))
    line = re.search(rf"^  {re.escape(measured['benchmark'])}: measured (\d+) samples/s; predicted (\d+) "
                     rf"\(band (\d+) to (\d+)\) from {re.escape(predicted['predicted_from'])} over .*: measured / "
                     r"predicted = ([0-9.]+), (inside|outside) the band$", out, re.M)
    assert line, (measured["benchmark"], out[-3000:])
    # The CSV holds 6 significant digits, the console rounds the full figures: equal to within that.
    for printed, value in zip(line.groups()[:4], (got, point, low, high)):
        assert abs(int(printed) - value) <= 0.5 + 1e-5 * value, (line.group(0), got, point, low, high)
    assert abs(float(line.group(5)) - got / point) <= 0.005 + 1e-5, (line.group(0), got / point)
    at_an_edge = min(abs(got - low), abs(got - high)) <= 1e-5 * got
    if not at_an_edge:
        assert line.group(6) == ("inside" if low <= got <= high else "outside"), (line.group(0), low, got, high)


def assert_two_emulated_hosts(rows, spanning):
    for r in rows:
        assert "nodes" in r and "rank_hosts" in r and "emulated_nodes" in r, \
            "the CSV has no nodes/rank_hosts/emulated_nodes columns (schema 5)"
        assert r["nodes"] == "2", (r["benchmark"], r["nodes"])
        assert r["rank_hosts"] == "tb-emulated-node-0:0;tb-emulated-node-1:0", (r["benchmark"], r["rank_hosts"])
    measured = [r for r in rows if r["device"] == spanning and r["measurement"] == "measured"]
    assert len(measured) == 1 and measured[0]["emulated_nodes"] == "1", [(r["benchmark"], r["emulated_nodes"]) for r in rows]
    assert measured[0]["benchmark"].endswith("/emulated_nodes/nodes:2"), measured[0]["benchmark"]
    if measured[0]["status"] == "ok":
        assert "emulated nodes" in measured[0]["message"], measured[0]["message"]
    # The one-device baseline runs on rank 0 alone: not an emulated-node row.
    assert all(r["emulated_nodes"] == "" for r in rows if r["device"] != spanning), rows


@pytest.mark.parametrize("sig, status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_an_interrupted_run_removes_everything(cpu_nodes, runs, sig, status):
    p = start_script(runs, ["--rate", "1gbit", "--", "sleep", "300"])
    try:
        def ranks_running():
            """A rank (sleep) running in each of the run's two namespaces."""
            ours = [n for n in namespaces() if n.startswith(f"tbemu{p.pid}-")]
            return len(ours) == 2 and all(sleeping_in(n) for n in ours)
        deadline = time.monotonic() + 60
        while not ranks_running():
            assert p.poll() is None and time.monotonic() < deadline, p.communicate(timeout=60)
            time.sleep(0.2)
        # What the clean-up check looks for is there while the run is.
        live = leftovers(p.pid)
        assert len(live["namespaces"]) == 2 and live["processes"] and live["files"], live
        p.send_signal(sig)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    assert p.returncode == status, err
    assert f"interrupted by SIG{sig.name[3:]}" in err, err


def test_a_second_signal_during_the_clean_up_does_not_stop_it(cpu_nodes, runs):
    """Ranks that ignore SIGTERM keep mpirun, and so the clean-up, waiting for seconds; a TERM sent
    then (a caller giving up after its interrupt) must not end the script before the namespaces
    are gone (the runs fixture checks that nothing is left)."""
    p = start_script(runs, ["--rate", "1gbit", "--", "sh", "-c", "trap '' TERM; sleep 300"])
    try:
        deadline = time.monotonic() + 60
        while not (len(ours := [n for n in namespaces() if n.startswith(f"tbemu{p.pid}-")]) == 2
                   and all(sleeping_in(n) for n in ours)):
            assert p.poll() is None and time.monotonic() < deadline, p.communicate(timeout=60)
            time.sleep(0.2)
        p.send_signal(signal.SIGINT)
        time.sleep(1.0)
        assert p.poll() is None, "the clean-up ended within 1 s: the second signal would test nothing"
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    assert p.returncode == 130, err
    assert "interrupted by SIGINT" in err, err


def test_a_failing_program_leaves_nothing(cpu_nodes, runs):
    status, _, err = run_script(runs, ["--", "sh", "-c", "exit 3"], timeout=120)
    assert status != 0 and "mpirun exited with status" in err, err


def test_bad_usage_exits_2_and_leaves_nothing(runs):
    status, _, err = run_script(runs, ["--rate", "1gigabit", "--", "true"], timeout=30)
    assert status == 2 and "is not a rate in tc's units" in err, err
    status, _, err = run_script(runs, ["--nodes", "1", "--", "true"], timeout=30)
    assert status == 2 and "number of nodes from 2" in err, err
    status, _, err = run_script(runs, ["--check", "--", "true"], timeout=30)
    assert status == 2 and "--check runs no program" in err, err


# A chroot into a folder that is not a mount point, on a tmpfs of a private mount namespace: this
# machine's /usr and /etc bound in, '/' not a mount point, as in a root made by mmdebstrap alone.
# The tmpfs covers an empty folder of its own ($2), not /tmp, which may hold the scripts ($1).
CHROOT = r"""
set -e
mount -t tmpfs tmpfs "$2"; r="$2/root"  # seen in this namespace only
mkdir -p "$r/run" "$r/tmp" "$r/proc" "$r/scripts"; chmod 1777 "$r/tmp"
for d in bin sbin lib lib32 lib64 libx32; do
  if [ -L "/$d" ]; then cp -a "/$d" "$r/"; elif [ -d "/$d" ]; then mkdir "$r/$d"; mount --rbind "/$d" "$r/$d"; fi
done
for d in usr etc dev sys; do mkdir -p "$r/$d"; mount --rbind "/$d" "$r/$d"; done
mount -t proc proc "$r/proc"
mount --bind "$1" "$r/scripts"
status=0
chroot "$r" /scripts/emulate_nodes.sh "${@:3}" || status=$?
echo "namespaces left:" $(ls "$r/run/netns" 2>/dev/null)
exit $status
"""


@pytest.mark.parametrize("args", [["--check"], ["--rate", "1gbit", "--", "true"]])
def test_a_chroot_whose_root_is_no_mount_point_exits_2_saying_so(args, tmp_path):
    holder = tmp_path / "holder"
    holder.mkdir()
    r = subprocess.run(["unshare", "--mount", "--propagation", "private", "bash", "-c", CHROOT, "chroot",
                        str(SCRIPT.parent), str(holder), *args], capture_output=True, text=True, timeout=60)
    assert not any(holder.iterdir()), "the tmpfs and its mounts were the namespace's only"
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("emulate_nodes.sh: error: this machine cannot run emulated nodes: "
                                                  "'/' is not a mount point here"), r.stderr
    assert r.stdout.strip() == "namespaces left:", r.stdout  # its probe namespace removed


def has_gpu():
    try:
        return subprocess.run(["nvidia-smi", "-L"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def test_gpu_mode_gives_each_rank_its_nccl_host_on_gpu_0(runs):
    status, out, err = run_script(runs, ["--gpu", "2", "--", "sh", "-c", PROBE], timeout=120)
    assert status == 0, err
    ranks = probes(out)
    assert sorted(ranks) == [0, 1], out
    for k, r in ranks.items():
        assert r["hostid"] == f"tb-emulated-node-{k}" and r["host"] == f"tb-emulated-node-{k}", r
        assert (r["ifname"], r["ib"], r["gpu"], r["emulated"], r["local"]) == ("lo", "1", "0", "2", "0"), r


def test_gpu_mode_runs_trainbench_and_without_a_gpu_skips_with_the_reason(runs, tmp_path):
    csv_path = tmp_path / "gpu.csv"
    status, out, err = run_script(runs, ["--gpu", "2", "--", BINARY, "--devices=gpu:1,gpu:2", *MLP, f"--csv={csv_path}"],
                                  timeout=180)
    assert status == 0, err
    rows = read_csv(csv_path)
    assert sorted(r["device"] for r in rows if r["measurement"] != "predicted") == ["gpu:1", "gpu:2"], rows
    gpu = has_gpu()
    for r in rows:
        assert r["ranks"] == "2" and r["host"] == "tb-emulated-node-0", (r["ranks"], r["host"])
        # Without a GPU every row is skipped with the reason; with one, a build without the CUDA
        # backend skips them too, saying so.
        assert r["status"] == "skipped" or (gpu and r["status"] == "ok"), (r["benchmark"], r["status"], r["message"])
        if r["status"] == "skipped":
            assert re.search(r"CUDA|NVIDIA|GPU", r["message"]), r["message"]
            assert f"skipped {r['device']}:" in out + err
    assert_two_emulated_hosts(rows, "gpu:2")
