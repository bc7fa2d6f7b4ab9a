"""``scan --ray``: the scan spread over a real Ray cluster of two nodes on this machine.

One cluster serves every test of the session (both pytest-xdist workers: a file lock and a count
of users in the session's shared temporary folder): a head and a second node, one CPU each, so
that two shards in flight at once run on two nodes. Each node is a ``ray start --block`` in a
process group of its own, which ends the node with everything it started.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import FIXTURES, run_python
from loaderdoctor.report.scan import format_settings
from loaderdoctor.scan import ScanReport, ShardRun
from loaderdoctor.scan.cluster import absolute_spec, shard_size, shards_of
from loaderdoctor.scan.state import ScanState

SCAN = FIXTURES / "scan" / "scan_datasets.py"
HAS_RAY = importlib.util.find_spec("ray") is not None
needs_ray = pytest.mark.skipif(
    not HAS_RAY, reason="ray is not installed (pip install 'loaderdoctor[ray]')"
)
NODE_START_S = 120  # a node joins in about 8 s on an idle machine; a loaded one is slower
RAY = Path(sys.executable).parent / "ray"
# No usage report; no token authentication (a local cluster's default in this Ray, which reads,
# and ray.init writes, ~/.ray/auth_token: a file this machine's other users share); workers at
# nice 0, as a Ray that scan --ray starts has them (Ray's 15 starves them beside other work).
HERMETIC = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_AUTH_MODE": "disabled",
    "RAY_worker_niceness": "0",
}


# --- unit: data in, exact output --------------------------------------------------------------
def test_shards_cover_every_index_once_within_the_bounds() -> None:
    assert shards_of([0, 1, 2, 5, 6], 2) == [[0, 1], [2, 5], [6]]
    assert shard_size(100_000, slots=4) == 4096  # the ceiling: short times between checkpoints
    assert shard_size(1000, slots=4) == 63
    assert shard_size(40, slots=8) == 32  # the floor: start-up small beside the samples


def test_specs_sent_to_nodes_name_absolute_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert absolute_spec("data/train.py:dataset") == f"{tmp_path}/data/train.py:dataset"
    assert absolute_spec("pkg.data:train") == "pkg.data:train"  # found on sys.path
    assert absolute_spec(".") == str(tmp_path)


def test_shards_and_their_nodes_survive_the_checkpoint_and_the_report() -> None:
    state = ScanState("x.py:d", 8)
    state.shards.append(ShardRun(0, 3, 4, "10.0.0.2", "ab" * 28, 1.5))
    again = ScanState.from_dict(json.loads(json.dumps(state.to_dict())))
    assert again.shards == state.shards
    report = ScanReport("x.py:d", 8, 8, [], [], [], 1.0, 2, shards=state.shards)
    assert ScanReport.from_json(report.to_json()) == report
    report.shards.append(ShardRun(4, 7, 4, "10.0.0.3", "cd" * 28, 1.0))
    assert format_settings(report) == "Ray: 2 shards on 2 nodes"


# What Ray 2.60's client wrote on stderr, once a second for 20 s, joining a `ray start --head` that
# has token authentication on without the token; then it raised ConnectionError("Failed to
# connect to Ray cluster at 10.0.0.2:6379").
RAY_REFUSED = (
    "[2026-12-06 04:23:26,844 W 8896 8896] gcs_client.cc:210: Failed to get cluster ID from GCS "
    "server: Unauthenticated: RPC error: InvalidAuthToken: Authentication token is missing or "
    "incorrect\n"
)
AUTH_CURE = (
    "the cluster has token authentication on; pass its token with RAY_AUTH_MODE=token and "
    "RAY_AUTH_TOKEN=TOKEN (or RAY_AUTH_TOKEN_PATH=FILE) in the environment "
    "(`ray get-auth-token` on the head prints it)"
)


def test_a_cluster_that_refuses_the_token_says_authentication_failed_and_the_cure() -> None:
    from loaderdoctor.scan.cluster import join_error

    refused = ConnectionError("Failed to connect to Ray cluster at 10.0.0.2:6379")
    where = "cannot join the Ray cluster at 10.0.0.2:6379: authentication failed"
    assert join_error(refused, "10.0.0.2:6379", RAY_REFUSED * 20, {}) == (
        f"{where} (no token was given): {AUTH_CURE}"
    )
    assert join_error(refused, "10.0.0.2:6379", RAY_REFUSED, {"RAY_AUTH_TOKEN": "x"}) == (
        f"{where} (RAY_AUTH_TOKEN is set, but RAY_AUTH_MODE is not 'token'): {AUTH_CURE}"
    )
    wrong = {"RAY_AUTH_TOKEN": "x", "RAY_AUTH_MODE": "token"}
    assert join_error(refused, "10.0.0.2:6379", RAY_REFUSED, wrong) == (
        f"{where} (the token given (RAY_AUTH_TOKEN) is not the cluster's): {AUTH_CURE}"
    )
    # anything else keeps Ray's own first line
    assert join_error(refused, None, "", {}) == (
        "cannot join the Ray cluster (RAY_ADDRESS, or a local Ray): "
        "Failed to connect to Ray cluster at 10.0.0.2:6379"
    )


# --- integration: a real cluster ----------------------------------------------------------------
@dataclass
class Node:
    pgid: int
    node_id: str


@dataclass
class Cluster:
    address: str
    head: Node
    second: Node
    temp_dir: str


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start_node(arguments: list[str], log: Path) -> Node:
    """``ray start ... --block`` in a session of its own, once it says it runs; its node id."""
    ports = ["--dashboard-agent-listen-port", "--dashboard-agent-grpc-port"]
    ports += ["--runtime-env-agent-port", "--metrics-export-port"]
    command = [str(RAY), "start", *arguments, "--object-store-memory", str(100 << 20), "--block"]
    for option in ports:
        command += [option, str(free_port())]
    with open(log, "wb") as output:
        process = subprocess.Popen(
            command,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, **HERMETIC},
        )
    deadline = time.monotonic() + NODE_START_S
    try:
        while b"Ray runtime started" not in log.read_bytes():
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"ray start did not start: {log.read_text()[-2000:]}")
            time.sleep(0.2)
        return Node(process.pid, raylet_node_id(process.pid))
    except BaseException:
        kill_node(process.pid)
        raise


def raylet_node_id(pgid: int) -> str:
    """The node id on the command line of the raylet in the process group ``pgid``."""
    import psutil

    for process in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error, ProcessLookupError):
            cmdline = process.info["cmdline"] or []
            if cmdline and cmdline[0].endswith("/raylet") and os.getpgid(process.pid) == pgid:
                (node_id,) = [a.split("=", 1)[1] for a in cmdline if a.startswith("--node_id=")]
                return node_id
    raise RuntimeError(f"no raylet in process group {pgid}")


def kill_node(pgid: int) -> None:
    """SIGKILL to the node's process group (raylet, its workers, their DataLoader workers)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        with contextlib.suppress(ChildProcessError):
            os.waitpid(-pgid, os.WNOHANG)  # ours, if this process started it
        time.sleep(0.05)


def start_cluster() -> Cluster:
    temp_dir = tempfile.mkdtemp(prefix="ldray-", dir="/tmp")  # Ray's socket paths must be short
    port = free_port()
    started: list[Node] = []
    try:
        head_options = ["--head", "--node-ip-address", "127.0.0.1", "--port", str(port)]
        head_options += ["--num-cpus", "1", "--include-dashboard=false", "--temp-dir", temp_dir]
        started.append(start_node(head_options, Path(temp_dir) / "head.log"))
        second_options = ["--address", f"127.0.0.1:{port}", "--num-cpus", "1"]
        second_options += ["--resources", json.dumps({"loaderdoctor_second": 1})]
        started.append(start_node(second_options, Path(temp_dir) / "second.log"))
    except BaseException:
        for node in started:
            kill_node(node.pgid)
        shutil.rmtree(temp_dir, ignore_errors=True)
        raise
    head, second = started
    return Cluster(f"127.0.0.1:{port}", head, second, temp_dir)


def stop_cluster(cluster: Cluster) -> None:
    kill_node(cluster.second.pgid)
    kill_node(cluster.head.pgid)
    shutil.rmtree(cluster.temp_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Iterator[Cluster]:
    """One cluster for the session, shared by the xdist workers; the last one out stops it."""
    if not HAS_RAY:
        pytest.skip("ray is not installed (pip install 'loaderdoctor[ray]')")
    from filelock import FileLock

    base = tmp_path_factory.getbasetemp()
    shared = base if worker_id == "master" else base.parent
    record = shared / "ray-cluster.json"
    with FileLock(str(shared / "ray-cluster.lock"), timeout=300):
        if record.exists():
            data = json.loads(record.read_text())
        else:
            data = {"cluster": _as_dict(start_cluster()), "users": 0}
        data["users"] += 1
        record.write_text(json.dumps(data))
    try:
        yield _from_dict(data["cluster"])
    finally:
        with FileLock(str(shared / "ray-cluster.lock"), timeout=300):
            data = json.loads(record.read_text())
            data["users"] -= 1
            if data["users"] == 0:
                stop_cluster(_from_dict(data["cluster"]))
                record.unlink()
            else:
                record.write_text(json.dumps(data))


def _as_dict(cluster: Cluster) -> dict[str, object]:
    return {
        "address": cluster.address,
        "head": [cluster.head.pgid, cluster.head.node_id],
        "second": [cluster.second.pgid, cluster.second.node_id],
        "temp_dir": cluster.temp_dir,
    }


def _from_dict(data: dict[str, object]) -> Cluster:
    head, second = data["head"], data["second"]
    assert isinstance(head, list) and isinstance(second, list)
    return Cluster(str(data["address"]), Node(*head), Node(*second), str(data["temp_dir"]))


def scan_command(spec: str, out: Path, *options: str) -> list[str]:
    return ["-m", "loaderdoctor", "scan", f"{SCAN}:{spec}", "--out", str(out), *options]


@pytest.mark.slow
@pytest.mark.ray
def test_ray_scan_names_the_bad_samples_of_a_local_scan_on_both_nodes(
    cluster: Cluster, tmp_path: Path
) -> None:
    from loaderdoctor.scan import scan_dataset
    from test_scan import datasets

    local = scan_dataset(datasets.Planted(), num_workers=1, timeout=1.5)
    options = ["--ray", cluster.address, "--shard-size", "4", "--num-workers", "1"]
    command = scan_command("planted", tmp_path / "q.json", *options, "--timeout", "1.5")
    result = run_python([*command, "--json"], env=HERMETIC, timeout=240)
    assert result.returncode == 1, result.stderr
    report = ScanReport.from_json(result.stdout)
    assert [(b.index, b.cause) for b in report.bad] == [(b.index, b.cause) for b in local.bad]
    assert [o.index for o in report.outliers] == [o.index for o in local.outliers]
    assert [(s.first, s.last) for s in report.shards] == [(i, i + 3) for i in range(0, 20, 4)]
    ran_on = {shard.node_id for shard in report.shards}
    assert ran_on == {cluster.head.node_id, cluster.second.node_id}
    assert json.loads((tmp_path / "q.json").read_text())  # the quarantine file, as locally
    assert not (tmp_path / "q.checkpoint.json").exists()  # complete: nothing to resume


@pytest.mark.slow
@pytest.mark.ray
def test_a_node_killed_mid_scan_loses_no_finished_shard_and_a_rerun_resumes(
    cluster: Cluster, tmp_path: Path
) -> None:
    """A third node joins, finishes a shard and is SIGKILLed with its raylet mid-scan; the scan
    goes on (Ray re-runs its shards elsewhere), is stopped, and ``--resume`` completes it."""
    doomed = start_node(
        ["--address", cluster.address, "--num-cpus", "1"], Path(cluster.temp_dir) / "doomed.log"
    )
    log, out = tmp_path / "fetched.log", tmp_path / "q.json"
    checkpoint = tmp_path / "q.checkpoint.json"
    # The spec is a file of its own: a Ray task has its node's environment, not the test's.
    (tmp_path / "logged.py").write_text(
        f"import sys\nsys.path.insert(0, {str(SCAN.parent)!r})\nimport scan_datasets\n"
        f"dataset = scan_datasets.Logged(length=300)\ndataset.log = {str(log)!r}\n"
    )
    options = ["--ray", cluster.address, "--shard-size", "10", "--num-workers", "1", "--json"]
    command = ["-m", "loaderdoctor", "scan", f"{tmp_path}/logged.py:dataset", "--out", str(out)]
    command += options
    scan = subprocess.Popen(
        [sys.executable, *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, **HERMETIC},
    )
    try:
        before_kill = wait_for_shards(checkpoint, lambda s: s.node_id == doomed.node_id, scan)
        kill_node(doomed.pgid)
        fetched_at_kill = len(log.read_text().split())
        wait_for_shards(checkpoint, lambda s: s not in before_kill, scan)  # it goes on
        scan.send_signal(signal.SIGTERM)
        _, stderr = scan.communicate(timeout=60)
        assert scan.returncode == 130, stderr
        assert "--resume" in stderr
    finally:
        kill_node(doomed.pgid)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(scan.pid, signal.SIGKILL)
        scan.wait(timeout=30)
    saved = ScanState.from_dict(json.loads(checkpoint.read_text()))
    assert all(shard in saved.shards for shard in before_kill)  # not one finished shard lost
    resumed = run_python([*command, "--resume"], env=HERMETIC, timeout=240)
    assert resumed.returncode == 1, resumed.stderr
    report = ScanReport.from_json(resumed.stdout)
    assert [(b.index, b.cause) for b in report.bad] == [(3, "sample-error"), (150, "sample-error")]
    assert report.scanned == 298 and report.resumed == len(saved)
    assert all(shard in report.shards for shard in before_kill)
    assert sorted(i for s in report.shards for i in range(s.first, s.last + 1)) == list(range(300))
    fetched_later = {int(i) for i in log.read_text().split()[fetched_at_kill:]}
    finished = {i for s in before_kill for i in range(s.first, s.last + 1)}
    assert not fetched_later & finished  # no finished shard was scanned again


def wait_for_shards(
    checkpoint: Path, wanted: object, scan: subprocess.Popen[str], timeout: float = 180
) -> list[ShardRun]:
    """The checkpoint's shards once one of them is ``wanted`` (a predicate); bounded."""
    assert callable(wanted)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert scan.poll() is None, scan.communicate(timeout=30)[1]
        with contextlib.suppress(OSError, ValueError):
            shards = ScanState.from_dict(json.loads(checkpoint.read_text())).shards
            if any(wanted(shard) for shard in shards):
                return shards
        time.sleep(0.05)
    pytest.fail(f"no such shard in {checkpoint} after {timeout} s")


@pytest.mark.slow
@pytest.mark.ray
def test_a_spec_that_fails_on_a_node_is_one_line_and_keeps_the_checkpoint(
    cluster: Cluster, tmp_path: Path
) -> None:
    command = scan_command("only_here", tmp_path / "q.json", "--ray", cluster.address)
    result = run_python(command, env=HERMETIC, timeout=240)
    assert result.returncode == 130, result.stderr
    (line,) = [line for line in result.stderr.splitlines() if "error:" in line]
    assert line.startswith("loaderdoctor scan: error: a Ray task could not scan samples 0-19: ")
    assert "FileNotFoundError: /data/train: no such folder on this node" in line
    assert line.endswith("run the same command with --resume to continue")
    saved = ScanState.from_dict(json.loads((tmp_path / "q.checkpoint.json").read_text()))
    assert saved.total == 20 and len(saved) == 0  # a re-run with --resume starts it over


@needs_ray
def test_no_cluster_at_the_address_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from loaderdoctor.cli import main

    argv = ["scan", f"{SCAN}:planted", "--out", str(tmp_path / "q.json")]
    assert main([*argv, "--ray", f"127.0.0.1:{free_port()}"]) == 2
    error = capsys.readouterr().err
    assert error.startswith("loaderdoctor scan: error: no Ray cluster answers at 127.0.0.1:")
    assert len(error.splitlines()) == 1, error


def test_without_ray_the_error_names_the_extra(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from loaderdoctor.cli import main

    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    argv = ["scan", f"{SCAN}:planted", "--ray", "--out", str(tmp_path / "q.json")]
    assert main(argv) == 2
    assert capsys.readouterr().err == (
        "loaderdoctor scan: error: --ray needs Ray, which is not installed: "
        "pip install 'loaderdoctor[ray]'\n"
    )
