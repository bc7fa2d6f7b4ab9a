"""A real two-node torchrun job on this machine: one ``loaderdoctor run`` per node, as torchrun
is started on each node, both writing under one report dir; ``loaderdoctor report DIR`` makes
the one job report. Node 1's rank loses a DataLoader worker to SIGKILL at sample 5."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import FIXTURES, run_python
from loaderdoctor.runner.node import node_folder

pytestmark = pytest.mark.slow
SCRIPT = FIXTURES / "run" / "nodes.py"
LAUNCH_TIMEOUT_S = 150.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def two_node_job(tmp_path: Path, mode: str, *run_options: str) -> list[int]:
    """Both nodes' ``loaderdoctor run -- torchrun ...`` to their end; their exit codes."""
    port = free_port()
    processes: list[subprocess.Popen[bytes]] = []
    try:
        for node_rank in (0, 1):
            log = open(tmp_path / f"node{node_rank}.log", "wb")
            with log:
                processes.append(
                    subprocess.Popen(
                        [
                            *(sys.executable, "-m", "loaderdoctor", "run", *run_options),
                            *("--report-dir", str(tmp_path / "job"), "--"),
                            *(sys.executable, "-m", "torch.distributed.run", "--nnodes", "2"),
                            *("--node-rank", str(node_rank), "--nproc-per-node", "1"),
                            *("--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}"),
                            *(str(SCRIPT), mode, "plant" if node_rank == 1 else "clean"),
                            str(tmp_path),
                        ],
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )
        deadline = time.monotonic() + LAUNCH_TIMEOUT_S
        return [p.wait(timeout=max(deadline - time.monotonic(), 1)) for p in processes]
    finally:
        for process in processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=30)


def job_report(tmp_path: Path) -> tuple[subprocess.CompletedProcess[str], dict]:
    result = run_python(
        ["-m", "loaderdoctor", "report", str(tmp_path / "job")], timeout=60, env={"COLUMNS": "200"}
    )
    return result, json.loads((tmp_path / "job" / "report.json").read_text())


def logs(tmp_path: Path) -> str:
    return "\n".join((tmp_path / f"node{n}.log").read_text()[-3000:] for n in (0, 1))


def planted_rank(tmp_path: Path) -> int:
    """The global rank torch gave node 1's process (the c10d rendezvous orders nodes itself)."""
    ranks = [json.loads(path.read_text()) for path in tmp_path.glob("rank*.json")]
    return next(r["rank"] for r in ranks if r["planted"])


def test_one_job_report_names_the_node_rank_worker_and_sample_that_ended_it(
    tmp_path: Path,
) -> None:
    exit_codes = two_node_job(tmp_path, "crash")
    assert exit_codes == [1, 1], logs(tmp_path)  # node 0's rank fails at the next all_reduce
    result, report = job_report(tmp_path)
    assert result.returncode == 1, result.stderr
    node0, node1 = (node_folder(n, socket.gethostname(), 0) for n in (0, 1))
    assert report["schema"] == 1 and report["status"] == "crashed"
    assert [(n["name"], n["rank"], n["status"]) for n in report["nodes"]] == [
        (node0, 0, "crashed"),
        (node1, 1, "crashed"),
    ]
    (rank,) = report["nodes"][1]["ranks"]
    assert report["nodes"][0]["ranks"] == [1 - rank]
    assert [(r["node"], r["rank"]) for r in report["ranks"]] == [(node0, 1 - rank), (node1, rank)]
    [incident] = report["incidents"]
    where = ("node", "rank", "worker_id", "indices", "cause", "action", "signal")
    assert tuple(incident[key] for key in where) == (
        *(node1, rank, 0, [5], "killed-by-signal", "raised", "SIGKILL"),
    )
    assert report["job"]["ended_by"] == {
        **{"node": node1, "node_rank": 1, "rank": rank},
        **{"cause": "killed-by-signal", "exit_code": 1},
    }
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"loaderdoctor job: the job failed on {node1}, rank {rank}: exit ")
    assert lines[-1] == (
        "verdict: killed-by-signal: Something outside the worker killed it "
        f"({node1}, rank {rank}, worker 0, sample 5, batch 2)"
    )
    page = (tmp_path / "job" / "report.html").read_text()
    assert f"ended by <b>{node1}, rank {rank}</b> (killed-by-signal)" in page
    assert f'<a href="{node1}/report.html">{node1}</a>' in page


def test_a_healed_job_delivers_every_healthy_sample_once_on_every_rank(tmp_path: Path) -> None:
    exit_codes = two_node_job(tmp_path, "heal", "--heal")
    assert exit_codes == [0, 0], logs(tmp_path)
    rank = planted_rank(tmp_path)
    seen = {
        r["rank"]: sorted(r["seen"])
        for r in (json.loads(path.read_text()) for path in tmp_path.glob("rank*.json"))
    }
    assert seen == {rank: [i for i in range(12) if i != 5], 1 - rank: list(range(12))}
    result, report = job_report(tmp_path)
    assert result.returncode == 0, result.stderr
    node1 = node_folder(1, socket.gethostname(), 0)
    assert report["status"] == "healed" and report["job"]["ended_by"] is None
    assert [n["status"] for n in report["nodes"]] == ["ok", "healed"]
    assert [(i["node"], i["rank"], i["indices"], i["action"]) for i in report["incidents"]] == [
        (node1, rank, [5], "quarantined")
    ]
    assert report["quarantine"] == [5] and report["delivered"]["samples"] == 23
    assert result.stdout.splitlines()[-1] == "verdict: 1 incident(s) healed (killed-by-signal)"
