"""Unit tests of a multi-node run's data: which node a run is, the job report merged from the
node folders, its renderers, and the one-line errors of ``loaderdoctor report``: no processes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from loaderdoctor.cli import main
from loaderdoctor.forensics.incident import Incident
from loaderdoctor.report.html.run import format_html
from loaderdoctor.report.run_text import format_text
from loaderdoctor.runner.core import load_report, write_report
from loaderdoctor.runner.job import load_run_or_job, merge_job
from loaderdoctor.runner.model import (
    Delivered,
    EndedBy,
    NodeInfo,
    ProcessSummary,
    RunReport,
    RunStatus,
)
from loaderdoctor.runner.node import node_of

TORCHRUN = ["torchrun", "--nproc-per-node", "1", "--rdzv-backend", "c10d"]


@pytest.mark.parametrize(
    ("command", "environ", "expected"),
    [
        ([*TORCHRUN, "--nnodes", "2", "--node-rank", "1", "t.py"], {}, ("node1-gpu07", 1, "2")),
        (
            ["--", sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--node_rank=0"],
            {},
            ("node0-gpu07", 0, "2"),
        ),
        # the rendezvous assigns the rank later: the run's pid keeps two on one machine apart
        ([*TORCHRUN, "--nnodes", "1:4", "t.py"], {}, ("node-gpu07-77", None, "1:4")),
        # the script's own --node-rank is not torchrun's
        (
            [*TORCHRUN, "--nnodes", "2", "t.py", "--node-rank", "3"],
            {},
            ("node-gpu07-77", None, "2"),
        ),
        ([*TORCHRUN, "--nnodes", "1", "--node-rank", "0", "t.py"], {}, None),
        ([*TORCHRUN, "--node-rank", "0", "t.py"], {"NODE_RANK": "0"}, None),  # torchrun: 1 node
        (["torchrun", "--standalone", "--nproc-per-node", "2", "t.py"], {}, None),
        (["python", "t.py"], {"NODE_RANK": "2"}, ("node2-gpu07", 2, None)),
        (
            ["python", "t.py"],
            {"SLURM_NODEID": "1", "SLURM_JOB_NUM_NODES": "4"},
            ("node1-gpu07", 1, "4"),
        ),
        (["python", "t.py"], {"SLURM_NODEID": "0", "SLURM_JOB_NUM_NODES": "1"}, None),
        (["python", "t.py"], {}, None),
        (["python", "t.py"], {"GROUP_RANK": "0", "GROUP_WORLD_SIZE": "1"}, None),
        (["python", "t.py"], {"GROUP_RANK": "1", "GROUP_WORLD_SIZE": "2"}, ("node1-gpu07", 1, "2")),
    ],
)
def test_which_node_a_run_is(
    command: list[str], environ: dict[str, str], expected: tuple | None
) -> None:
    node = node_of(command, environ, host="gpu07", pid=77)
    assert (node if node is None else (node.name, node.rank, node.nnodes)) == expected


@pytest.mark.parametrize(
    ("options", "environ", "job_id"),
    [
        (["--rdzv-id", "run7", "--rdzv-endpoint", "h:1"], {"SLURM_JOB_ID": "991"}, "slurm:991"),
        (["--rdzv-id", "run7", "--rdzv-endpoint", "h:1"], {}, "rdzv-id:run7"),
        (["--rdzv-endpoint", "10.0.0.1:29400"], {}, "rdzv:10.0.0.1:29400"),
        (["--master-addr", "10.0.0.1", "--master-port", "29500"], {}, "master:10.0.0.1:29500"),
        ([], {}, None),
    ],
)
def test_what_every_node_of_one_job_shares(
    options: list[str], environ: dict[str, str], job_id: str | None
) -> None:
    node = node_of([*TORCHRUN, "--nnodes", "2", *options, "t.py"], environ, host="h", pid=1)
    assert node is not None and node.job_id == job_id


def test_a_host_name_becomes_a_safe_folder_name() -> None:
    node = node_of(["python", "t.py"], {"NODE_RANK": "1"}, host="gpu 07/a", pid=1)
    assert node is not None and (node.name, node.host) == ("node1-gpu-07-a", "gpu 07/a")


def node_report(
    rank: int,
    status: RunStatus,
    exit_code: int,
    incidents: list[Incident] = (),  # type: ignore[assignment]
    *,
    started_wall: float = 1000.0,
    duration_s: float = 10.0,
    job_id: str | None = "rdzv:127.0.0.1:29400",
) -> RunReport:
    name = f"node{rank}-h"
    return RunReport(
        status=status,
        command=["torchrun", "--nnodes", "2", "--node-rank", str(rank), "train.py"],
        exit_code=exit_code,
        duration_s=duration_s,
        incidents=list(incidents),
        delivered=Delivered(4, 8),
        ranks=[ProcessSummary(100 + rank, rank, 1, Delivered(4, 8), len(incidents), workers=1)],
        notes=[
            f"{name} is one node of a multi-node job: loaderdoctor report DIR merges every "
            "node's report into one",
            "a note of its own",
        ],
        node=NodeInfo(name, "h", rank, "2", job_id, started_wall),
    )


def killed(action: str = "raised", time_s: float = 5.0) -> Incident:
    return Incident.from_dict(
        dict(
            cause="killed-by-signal",
            action=action,
            worker_id=0,
            pid=4242,
            signal="SIGKILL",
            indices=[5],
            batch=2,
            title="Something outside the worker killed it",
            rank=1,
            time_s=time_s,
        )
    )


def write_job(directory: Path, *reports: RunReport) -> Path:
    for report in reports:
        assert report.node is not None
        (directory / report.node.name).mkdir(parents=True)
        write_report(report, directory / report.node.name)
    return directory


def crashed_job(tmp_path: Path) -> RunReport:
    # node 0 started first and failed last: its rank lost its peer at the next collective
    return merge_job(
        write_job(
            tmp_path,
            node_report(0, "crashed", 1, duration_s=9.0),
            node_report(1, "crashed", 1, [killed()], started_wall=1001.0, duration_s=7.0),
        )
    )


def test_the_job_report_says_each_node_and_what_ended_it(tmp_path: Path) -> None:
    job = crashed_job(tmp_path)
    assert (job.status, job.exit_code, job.duration_s) == ("crashed", 1, 9.0)
    assert job.job is not None and (job.job.id, job.job.nodes) == ("rdzv:127.0.0.1:29400", 2)
    assert job.job.ended_by == EndedBy("node1-h", 1, 1, "killed-by-signal", 1)
    # its time counted from the job's first node's start, one second before node 1's
    assert [(i.node, i.rank, i.time_s) for i in job.incidents] == [("node1-h", 1, 6.0)]
    assert [(r.node, r.rank) for r in job.ranks] == [("node0-h", 0), ("node1-h", 1)]
    assert [(n.name, n.status, n.ranks, n.report) for n in job.nodes] == [
        ("node0-h", "crashed", [0], "node0-h/report.json"),
        ("node1-h", "crashed", [1], "node1-h/report.json"),
    ]
    assert job.delivered == Delivered(8, 16)
    assert job.notes == ["node0-h: a note of its own", "node1-h: a note of its own"]
    again = RunReport.from_dict(json.loads(job.to_json()))
    assert again.to_dict() == job.to_dict()
    assert list(job.to_dict())[:5] == ["schema", "status", "incidents", "quarantine", "delivered"]


@pytest.mark.parametrize(
    ("statuses", "status"),
    [
        (("ok", "healed"), "healed"),
        (("ok", "ok"), "ok"),
        (("healed", "healed-with-loss"), "healed-with-loss"),
        (("healed", "crashed"), "crashed"),
    ],
)
def test_the_worst_node_is_the_job_status(
    tmp_path: Path, statuses: tuple[RunStatus, RunStatus], status: RunStatus
) -> None:
    reports = [node_report(rank, s, 1 if s == "crashed" else 0) for rank, s in enumerate(statuses)]
    job = merge_job(write_job(tmp_path, *reports))
    assert job.status == status and job.job is not None
    ended = job.job.ended_by
    assert ended == (EndedBy("node1-h", 1, 1, None, 1) if status == "crashed" else None)


def test_with_no_incident_the_node_that_failed_first_ended_the_job(tmp_path: Path) -> None:
    job = merge_job(
        write_job(
            tmp_path,
            node_report(0, "crashed", 1, started_wall=1000.0, duration_s=9.0),
            node_report(1, "crashed", 137, started_wall=1000.0, duration_s=4.0),
        )
    )
    assert job.job is not None and job.job.ended_by == EndedBy("node1-h", 1, 1, None, 137)
    text = format_text(job, width=120).splitlines()
    assert text[-1] == "verdict: no DataLoader worker died; node1-h's command failed on its own"


def test_the_job_summary_shows_the_nodes_and_where_each_incident_was(tmp_path: Path) -> None:
    job = crashed_job(tmp_path)
    job.report_dir = "/r"
    lines = format_text(job, width=120).splitlines()
    assert lines[:5] == [
        "loaderdoctor job: the job failed on node1-h, rank 1: exit code 1 after 9.0 s (2 nodes)",
        "  8 batches, 16 samples delivered by 2 ranks on 2 nodes (2 supervised DataLoaders)",
        "node    ┃ host ┃ status  ┃ exit ┃ ranks ┃ samples ┃ incidents",
        "━━━━━━━━╇━━━━━━╇━━━━━━━━━╇━━━━━━╇━━━━━━━╇━━━━━━━━━╇━━━━━━━━━━",
        "node0-h │ h    │ crashed │ 1    │ 0     │ 8       │ 0        ",
    ]
    assert (
        "6.0   │ killed-by-signal │ node1-h, rank 1, worker 0, sample 5, batch 2 │ raised" in lines
    )
    assert lines[-2:] == [
        "  report: /r/report.json",
        "verdict: killed-by-signal: Something outside the worker killed it (node1-h, rank 1, "
        "worker 0, sample 5, batch 2)",
    ]


def test_the_job_page_has_the_nodes_and_each_rank_says_its_node(tmp_path: Path) -> None:
    page = format_html(crashed_job(tmp_path))
    assert "<h1>loaderdoctor job<span" in page
    assert (
        '<p class="meta">job <code>rdzv:127.0.0.1:29400</code> · 2 nodes · ended by '
        "<b>node1-h, rank 1</b> (killed-by-signal)</p>"
    ) in page
    assert '<tr><td><a href="node1-h/report.html">node1-h</a></td><td>h</td><td>1</td>' in page
    assert "<tr><th>node</th><th>pid</th><th>rank</th>" in page
    assert "<tr><td>node1-h</td><td>101</td><td>1</td>" in page
    assert '<p class="where"><b>node1-h</b> · rank 1 · worker 0 (pid 4242)' in page


def test_a_single_run_folder_reads_as_before(tmp_path: Path) -> None:
    single = node_report(0, "ok", 0)
    single.node = None
    write_report(single, tmp_path)
    (tmp_path / "earlier" / "20261201-210843").mkdir(parents=True)
    write_report(single, tmp_path / "earlier" / "20261201-210843")
    report, merged = load_run_or_job(tmp_path)
    assert not merged and report.to_dict() == load_report(tmp_path).to_dict()
    data = json.loads((tmp_path / "report.json").read_text())
    assert (data["node"], data["job"], data["nodes"]) == (None, None, [])


def report_error(directory: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(["report", "--no-html", str(directory)])
    return code, capsys.readouterr().err


def test_a_folder_with_no_report_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert report_error(tmp_path, capsys) == (
        2,
        f"loaderdoctor report: error: no report in {tmp_path}: neither report.json nor node "
        "folders with one (a multi-node run writes one folder per node)\n",
    )


def test_a_half_written_node_report_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_job(tmp_path, node_report(0, "ok", 0), node_report(1, "ok", 0))
    path = tmp_path / "node1-h" / "report.json"
    path.write_text(path.read_text()[:100])
    code, err = report_error(tmp_path, capsys)
    assert code == 2 and len(err.splitlines()) == 1
    assert err.startswith(f"loaderdoctor report: error: {path} is half-written (")
    assert err.endswith(
        "its node's run was cut off while writing it; rerun that node, or remove the folder\n"
    )


def test_a_node_folder_without_its_report_yet_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_job(tmp_path, node_report(0, "ok", 0))
    (tmp_path / "node1-h" / ".incidents").mkdir(parents=True)
    assert report_error(tmp_path, capsys) == (
        2,
        f"loaderdoctor report: error: {tmp_path / 'node1-h'} has no report.json: its node's run "
        "is starting, or was killed before it wrote one; wait for it, or remove the folder\n",
    )


def test_nodes_of_two_jobs_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_job(tmp_path, node_report(0, "ok", 0), node_report(1, "ok", 0, job_id="rdzv:other:1"))
    assert report_error(tmp_path, capsys) == (
        2,
        "loaderdoctor report: error: the node folders are of different jobs (node0-h: job "
        "rdzv:127.0.0.1:29400; node1-h: job rdzv:other:1): give each job its own --report-dir\n",
    )


def test_the_merged_job_report_is_written_beside_its_nodes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_job(tmp_path, node_report(0, "ok", 0), node_report(1, "healed", 0, [killed("skipped")]))
    assert main(["report", str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == "verdict: 1 incident(s) healed (killed-by-signal)"
    data = json.loads((tmp_path / "report.json").read_text())
    assert data["status"] == "healed" and data["job"]["nodes"] == 2
    assert "<h1>loaderdoctor job<span" in (tmp_path / "report.html").read_text()
    # again, over its own merged report.json: the node folders are merged afresh
    assert main(["report", "--json", str(tmp_path)]) == 0
    assert json.loads(capsys.readouterr().out)["nodes"] == data["nodes"]


def test_a_host_name_is_shown_as_written_not_as_markup(tmp_path: Path) -> None:
    job = crashed_job(tmp_path)
    job.nodes[0].host = "[bold]gpu[/bold]"
    assert "node0-h │ [bold]gpu[/bold] │ crashed" in format_text(job, width=120)
