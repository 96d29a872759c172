"""scripts/clean_root.sh on a tiny root of this machine's own binaries (sh, sleep, cat, ip and their
libraries, packed as a tarball: no download): inside, what a fresh machine has (`/` a mount point,
/proc of its own PIDs, /sys with /sys/fs/cgroup, /dev, /run, its host name, a login environment,
the uploads); afterwards, whether the command succeeded, failed, left processes behind, made a
network namespace, or the script was interrupted, no mount under the root, no process in it, no
network namespace of it, and the root gone unless kept. Needs root (namespaces and mounts);
skipped, saying why, elsewhere or where the machine refuses the namespaces."""
import os
import re
import select
import shutil
import signal
import subprocess
import tarfile
from pathlib import Path

import pytest

from conftest import SCRIPTS

SCRIPT = SCRIPTS / "clean_root.sh"
BINARIES = ("sh", "sleep", "cat", "ip")
HANG_S = 180  # how long a step may take before the test calls it hung

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the root's mounts and namespaces need root")


def libraries(binary):
    """The shared libraries `binary` loads, and its loader, as ldd lists them."""
    out = subprocess.run(["ldd", binary], capture_output=True, text=True, check=True).stdout
    return re.findall(r"(/\S+) \(0x", out)


@pytest.fixture(scope="module")
def root_tar(tmp_path_factory):
    """A tarball of a root holding BINARIES in /bin and their libraries where ldd found them."""
    missing = [b for b in BINARIES + ("ldd", "unshare", "mount", "chroot", "findmnt") if not shutil.which(b)]
    if missing:
        pytest.fail(f"{', '.join(missing)} not found (Debian: apt-get install iproute2 mount util-linux libc-bin)")
    probe = subprocess.run(["unshare", "--mount", "--pid", "--fork", "--uts", "--ipc", "--cgroup", "true"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"this machine does not permit the root's namespaces: {probe.stderr.strip()}")
    tree = tmp_path_factory.mktemp("tiny") / "root"
    for folder in ("bin", "etc", "proc", "sys", "dev", "run", "tmp", "var", "data"):
        (tree / folder).mkdir(parents=True)
    (tree / "var" / "run").symlink_to("../run")  # ip netns keeps its namespaces in /var/run/netns
    for name in BINARIES:
        binary = Path(shutil.which(name)).resolve()
        shutil.copy(binary, tree / "bin" / name)
        for library in libraries(str(binary)):
            target = tree / library.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(library, target)
    tar = tree.parent / "root.tar"
    with tarfile.open(tar, "w") as t:
        t.add(tree, arcname=".")
    return tar


def clean_root(*args, timeout=HANG_S, **kw):
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout, **kw)


def processes_in(root):
    """Processes whose root folder is `root`: the same folder by device and inode (its path reads
    differently from another mount namespace, as when this test runs in such a root)."""
    try:
        want = os.stat(root)
    except FileNotFoundError:
        return []
    found = []
    for p in Path("/proc").glob("[0-9]*"):
        try:
            st = os.stat(p / "root")
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == (want.st_dev, want.st_ino):
            found.append(p.name)
    return found


def mounts_under(root):
    targets = subprocess.run(["findmnt", "-rn", "-o", "TARGET"], capture_output=True, text=True).stdout.split()
    return [t for t in targets if t == str(root) or t.startswith(f"{root}/")]


def namespaces():
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def assert_nothing_left(root, removed=True):
    assert not mounts_under(root), mounts_under(root)
    assert not processes_in(root), processes_in(root)
    assert root.exists() != removed, root


# Inside: the mount table, the PIDs, the host name, /etc/hosts, the environment, an upload; then a
# network namespace (ip netns add mounts it on /run/netns, as emulate_nodes.sh does).
INSIDE = r"""
echo "== mountinfo"; cat /proc/self/mountinfo
echo "== pids" /proc/[0-9]*
echo "== hostname $(cat /proc/sys/kernel/hostname)"
echo "== hosts"; cat /etc/hosts
echo "== env FOO=$FOO HOME=$HOME PATH=$PATH LEAK=$TB_CLEAN_ROOT_LEAK"
echo "== upload $(cat /data/upload.txt)"
ip netns add "$1" && echo "== netns $(ip netns list)"
"""


def mountinfo(out):
    """Mount point -> file system type, from the lines of /proc/self/mountinfo in `out`."""
    table = {}
    for line in out.splitlines():
        fields = line.split()
        if len(fields) > 8 and "-" in fields:
            table[fields[4]] = fields[fields.index("-") + 1]
    return table


def test_the_root_looks_like_a_fresh_machine_and_goes_away(root_tar, tmp_path):
    root = tmp_path / "root"
    upload = tmp_path / "upload.txt"
    upload.write_text("carried in\n")
    netns = f"tbcr-selftest-{os.getpid()}"
    r = clean_root("--tar", str(root_tar), "--dir", str(root), "--upload", f"{upload}:/data/upload.txt",
                   "--env", "FOO=bar", "--", "/bin/sh", "-c", INSIDE, "sh", netns,
                   env=dict(os.environ, TB_CLEAN_ROOT_LEAK="1"))
    assert r.returncode == 0, r.stderr
    mounts = mountinfo(r.stdout)
    assert mounts.get("/") and mounts.get("/proc") == "proc" and mounts.get("/sys") == "sysfs", mounts
    # cgroup2, or this machine's v1 hierarchies under a tmpfs (a kernel in hybrid mode).
    assert mounts.get("/sys/fs/cgroup") in ("cgroup2", "tmpfs"), mounts
    if mounts["/sys/fs/cgroup"] == "tmpfs":
        assert any(m.startswith("/sys/fs/cgroup/") and kind in ("cgroup", "cgroup2") for m, kind in mounts.items())
    assert (mounts.get("/dev"), mounts.get("/dev/pts"), mounts.get("/dev/shm"), mounts.get("/run")) == (
        "tmpfs", "devpts", "tmpfs", "tmpfs"), mounts
    assert "/dev/null" in mounts and not any(m.startswith("/data") or m == "/tmp" for m in mounts), mounts
    # Its own PIDs: the root's init, the shell, cat; not this machine's hundreds.
    pids = re.search(r"^== pids (.*)$", r.stdout, re.M).group(1).split()
    assert "/proc/1" in pids and len(pids) < 10, pids
    assert "== hostname tb-clean-root" in r.stdout and "127.0.1.1\ttb-clean-root" in r.stdout, r.stdout
    assert "== env FOO=bar HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LEAK=\n" \
        in r.stdout, r.stdout
    assert "== upload carried in" in r.stdout and f"== netns {netns}" in r.stdout, r.stdout
    assert f"torn down: no mount under {root}, no process in it; the root is removed" in r.stderr, r.stderr
    assert_nothing_left(root)
    assert netns not in namespaces()


def test_the_commands_status_comes_back_and_what_it_left_is_stopped(root_tar, tmp_path):
    root = tmp_path / "root"
    # Exits once its background sleep runs (a forked child is still "sh" until it execs).
    r = clean_root("--tar", str(root_tar), "--dir", str(root), "--grace", "2", "--", "/bin/sh", "-c",
                   'sleep 300 & while [ "$(cat /proc/$!/comm)" != sleep ]; do :; done; exit 7')
    assert r.returncode == 7, r.stderr
    assert "the command left processes running in the root, stopped now:" in r.stderr, r.stderr
    assert "sleep[" in r.stderr, r.stderr
    assert_nothing_left(root)


@pytest.mark.parametrize("sig, status", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_an_interrupted_run_stops_everything_even_what_ignores_the_signal(root_tar, tmp_path, sig, status):
    root = tmp_path / "root"
    # The command ignores SIGTERM and SIGINT, and so does its sleep: only SIGKILL ends them.
    p = subprocess.Popen([str(SCRIPT), "--tar", str(root_tar), "--dir", str(root), "--grace", "1", "--",
                          "/bin/sh", "-c", "trap '' TERM INT; echo ready; sleep 300"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # The deadlines only catch a hang: under a load of 6 (four builds beside the tests) unpacking
    # the root and stopping it once took more than 60 s.
    try:
        ready, _, _ = select.select([p.stdout], [], [], HANG_S)
        assert ready and p.stdout.readline() == "ready\n", f"the command did not start within {HANG_S} s"
        p.send_signal(sig)
        _, err = p.communicate(timeout=HANG_S)
    finally:
        if p.poll() is None:
            # Killed, clean_root.sh leaves the root's processes (holding the pipes) to this test.
            p.kill()
            for pid in processes_in(root):
                os.kill(int(pid), signal.SIGKILL)
            p.communicate(timeout=HANG_S)
    assert p.returncode == status, err
    assert f"interrupted by SIG{sig.name[3:]}" in err and "stopping every process in the root" in err, err
    assert_nothing_left(root)


def test_keep_then_reuse_leave_the_root_and_nothing_else(root_tar, tmp_path):
    root = tmp_path / "root"
    try:
        r = clean_root("--tar", str(root_tar), "--dir", str(root), "--keep", "--", "/bin/sh", "-c", "echo kept >/data/mark")
        assert r.returncode == 0 and f"the root is kept in {root}" in r.stderr, r.stderr
        assert_nothing_left(root, removed=False)
        r = clean_root("--reuse", str(root), "--", "/bin/cat", "/data/mark")
        assert r.returncode == 0 and r.stdout == "kept\n", r.stderr
        assert_nothing_left(root, removed=False)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_bad_usage_exits_2_naming_the_option(root_tar, tmp_path):
    full = tmp_path / "full"
    full.mkdir()
    (full / "x").write_text("")
    for args, needle in ((["--tar", str(root_tar)], "no command"),
                         (["--dir", str(full), "--", "/bin/true"], "--dir:"),
                         (["--reuse", str(tmp_path), "--", "/bin/true"], "--reuse:"),
                         (["--reuse", str(tmp_path), "--keep", "--", "/bin/true"], "--reuse runs in a root as it is"),
                         (["--upload", "/no/such:/x", "--", "/bin/true"], "--upload:"),
                         (["--upload", "relative", "--", "/bin/true"], "--upload:"),
                         (["--env", "1=2", "--", "/bin/true"], "--env:"),
                         (["--grace", "soon", "--", "/bin/true"], "--grace:")):
        r = clean_root(*args)
        assert r.returncode == 2 and needle in r.stderr, (args, r.stderr)
    assert list(tmp_path.iterdir()) == [full]  # no root made
