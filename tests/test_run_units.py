"""Unit tests of ``loaderdoctor run``'s data, rules and renderers: no processes started."""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path

import pytest
import torch

from loaderdoctor.forensics.incident import Incident
from loaderdoctor.report.html.chart import (
    Chart,
    Line,
    label_baseline,
    label_rows,
    layout,
    nice_step,
)
from loaderdoctor.report.html.page import INCIDENT_COLOR, PALETTE
from loaderdoctor.report.html.run import format_html, memory_lines, write_html
from loaderdoctor.report.run_text import format_headline, format_text, summary_stack
from loaderdoctor.runner.core import (
    RunUsageError,
    exit_code_of,
    incident_from_record,
    resolve_command,
)
from loaderdoctor.runner.memory import MiB, find_memory_growth, linear_growth
from loaderdoctor.runner.model import (
    Delivered,
    MemoryReport,
    ProcessMemory,
    ProcessSummary,
    RunReport,
    run_status,
)


def worker(pid: int, uss_mib: list[float], method: str = "fork", parent: int = 1) -> ProcessMemory:
    series = [(0.5 * i, 300 * MiB, int(v * MiB), int(v * MiB)) for i, v in enumerate(uss_mib)]
    return ProcessMemory(
        pid=pid, role="worker", parent_pid=parent, start_method=method, series=series
    )


ROOT = Path(__file__).resolve().parents[1]


def sample_report() -> RunReport:
    incident = Incident.from_dict(
        dict(
            cause="native-crash",
            action="raised",
            worker_id=1,
            pid=4242,
            signal="SIGSEGV",
            indices=[21],
            epoch=0,
            batch=5,
            evidence=["the worker died of SIGSEGV"],
            fixes=["Look at the Python stack"],
            title="The worker crashed in native code",
            docs="docs/causes/native-crash.md",
            rank=1,
            process_pid=4000,
            time_s=2.5,
            diagnosis={"python_stack": "File 'x.py', line 3 in __getitem__ <b>"},
        )
    )
    memory = MemoryReport(
        interval_s=0.5,
        samples=8,
        shm_total_bytes=64 * MiB,
        shm_peak_used_bytes=8 * MiB,
        shm_series=[(0.0, MiB), (1.0, 8 * MiB), (2.0, 4 * MiB)],
        processes=[
            ProcessMemory(pid=4000, role="main", rank=1, series=[(0.0, 200 * MiB, None, None)]),
            worker(4242, [5, 20, 35, 50, 65, 80], parent=4000),
        ],
        findings=find_memory_growth([worker(4242, [5, 20, 35, 50, 65, 80], parent=4000)]),
    )
    return RunReport(
        status="crashed",
        command=["python", "train.py"],
        exit_code=1,
        duration_s=3.25,
        incidents=[incident],
        delivered=Delivered(5, 20),
        ranks=[
            ProcessSummary(pid=4000, rank=1, loaders=1, delivered=Delivered(5, 20), incidents=1)
        ],
        memory=memory,
        report_dir="/tmp/r",
    )


def test_report_round_trips_through_json() -> None:
    report = sample_report()
    data = json.loads(json.dumps(report.to_dict()))
    assert list(data)[:5] == ["schema", "status", "incidents", "quarantine", "delivered"]
    assert data["delivered"] == {"batches": 5, "samples": 20}
    assert RunReport.from_dict(data) == report


def test_unknown_schema_is_refused() -> None:
    data = sample_report().to_dict()
    data["schema"] = 99
    with pytest.raises(ValueError, match="schema"):
        RunReport.from_dict(data)


def test_incident_from_a_sink_record() -> None:
    record = {
        "time": 1010.5,
        "pid": 77,
        "rank": 0,
        "incident": {
            "cause": "sample-error",
            "action": "raised",
            "indices": [3],
            "diagnosis": {"title": "A sample raised", "docs": "docs/causes/sample-error.md"},
        },
    }
    incident = incident_from_record(record, started_wall=1000.0)
    assert (incident.cause, incident.indices, incident.rank, incident.process_pid) == (
        "sample-error",
        [3],
        0,
        77,
    )
    assert incident.time_s == 10.5 and incident.title == "A sample raised"


@pytest.mark.parametrize(
    ("exit_code", "actions", "status"),
    [
        (0, [], "ok"),
        (0, ["skipped", "respawned"], "healed"),
        (0, ["respawned", "lost"], "healed-with-loss"),  # a stream's items named lost
        (1, ["lost"], "crashed"),
        (0, ["raised"], "crashed"),
        (1, [], "crashed"),
        (1, ["skipped"], "crashed"),
    ],
)
def test_run_status(exit_code: int, actions: list[str], status: str) -> None:
    incidents = [
        Incident.from_dict({"cause": "sample-error", "action": action}) for action in actions
    ]
    assert run_status(exit_code, incidents) == status
    # Healing that delivered not one sample healed nothing; a run without incidents is ok.
    assert run_status(exit_code, incidents, 0) == ("crashed" if incidents else status)


def test_exit_code_of_a_signal_is_128_plus_n() -> None:
    assert exit_code_of(-9) == (137, "SIGKILL")
    assert exit_code_of(3) == (3, None)


def test_shorthand_and_missing_script(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("")
    assert resolve_command([str(script), "--epochs", "2"]) == [
        sys.executable,
        str(script),
        "--epochs",
        "2",
    ]
    assert resolve_command(["--", "sh", "-c", "true"]) == ["sh", "-c", "true"]
    with pytest.raises(RunUsageError, match=r"no such script: nope\.py"):
        resolve_command(["nope.py"])
    with pytest.raises(RunUsageError, match="no such script"):
        resolve_command(["--", "python3", "nope.py"])
    with pytest.raises(RunUsageError, match="no such command"):
        resolve_command(["--", "no-such-program-xyz"])
    with pytest.raises(RunUsageError, match="no command"):
        resolve_command(["--"])


def test_copy_on_read_needs_steady_growth_in_most_fork_workers() -> None:
    growing = [worker(10, [5, 20, 35, 50, 65, 80]), worker(11, [6, 22, 36, 52, 66, 81])]
    findings = find_memory_growth(growing)
    assert [f.id for f in findings] == ["copy-on-read"]
    assert findings[0].pids == [10, 11]
    assert "USS 5 MiB → 80 MiB over 2.5 s" in findings[0].evidence[0]
    flat = [worker(10, [50, 51, 50, 52, 51, 50]), worker(11, [50, 50, 51, 50, 52, 51])]
    assert find_memory_growth(flat) == []
    one_of_three = [worker(10, [5, 20, 35, 50, 65, 80]), *flat]
    for number, memory in enumerate(one_of_three):
        memory.pid = 20 + number
    assert find_memory_growth(one_of_three) == []
    too_short = [worker(10, [5, 80, 90])]
    assert linear_growth(too_short[0]) is None and find_memory_growth(too_short) == []


def test_growth_of_spawn_workers_is_not_copy_on_read() -> None:
    spawned = [
        worker(10, [5, 20, 35, 50, 65, 80], "spawn"),
        worker(11, [5, 20, 35, 50, 65, 80], "spawn"),
    ]
    assert [f.id for f in find_memory_growth(spawned)] == ["worker-memory-growth"]


def test_terminal_summary() -> None:
    report = sample_report()
    assert format_headline(report) == "the command failed: exit code 1 after 3.2 s"
    healed_nothing = sample_report()
    healed_nothing.incidents[0].action = "skipped"
    healed_nothing.exit_code, healed_nothing.status = 0, "crashed"
    assert format_headline(healed_nothing) == (
        "the command succeeded but its DataLoaders delivered no sample: exit code 0 after 3.2 s"
    )
    text = format_text(report, width=120, html=Path("/tmp/r/report.html"))
    lines = text.splitlines()
    assert lines[0] == "loaderdoctor run: the command failed: exit code 1 after 3.2 s"
    assert lines[1] == "  5 batches, 20 samples delivered by 1 ranks (1 supervised DataLoader)"
    assert "rank 1, worker 1, sample 21, batch 5" in text
    # The fix says "Look at the Python stack": the summary shows the stack it means.
    stack_at = lines.index("    Python stack of the worker:")
    assert lines[stack_at + 1 : stack_at + 3] == [
        "      File 'x.py', line 3 in __getitem__ <b>",
        "    fix: Look at the Python stack",
    ]
    assert "    more: loaderdoctor explain --cause native-crash" in lines  # works when installed
    assert "copy-on-read: Every fork worker's private memory grows" in text
    assert lines[-2:] == [
        "  report: /tmp/r/report.json, /tmp/r/report.html",
        "verdict: native-crash: The worker crashed in native code (rank 1, worker 1, sample 21, "
        "batch 5)",
    ]


def test_the_summary_shows_the_stuck_thread_first_and_cut() -> None:
    stuck = "Thread 0x2 (most recent call first):\n" + "".join(
        f'  File "net.py", line {n} in read\n' for n in range(20)
    )
    other = 'Current thread 0x1 (most recent call first):\n  File "w.py", line 1 in loop'
    assert summary_stack(f"{stuck}\n{other}") == [
        "Current thread 0x1 (most recent call first):",
        '  File "w.py", line 1 in loop',
    ]
    lines = summary_stack(stuck)
    assert lines[0] == "Thread 0x2 (most recent call first):"
    assert lines[1:12] == [f'  File "net.py", line {n} in read' for n in range(11)]
    assert lines[12:] == ["... (9 more lines in report.json)"]


def test_html_is_self_contained_and_escaped() -> None:
    page = format_html(sample_report())
    assert page.startswith("<!DOCTYPE html>")
    for outside in ("http://", "<script src", "<link"):
        assert outside not in page.replace('xmlns="http://www.w3.org/2000/svg"', "").replace(
            "https://github.com/pytorch/pytorch/issues/13246", ""
        )
    assert page.count("<svg") == 3  # the workers' memory, the main processes', /dev/shm
    assert "native-crash #21" in page  # the incident marked on the plots
    assert "__getitem__ &lt;b&gt;" in page  # the stack is escaped
    assert "copy-on-read" in page and "numpy" in page


def test_the_dead_workers_memory_line_ends_in_a_mark_that_says_how() -> None:
    page = format_html(sample_report())
    (mark,) = re.findall(r'<g class="end-mark" transform="translate\(([\d.]+),([\d.]+)\)">', page)
    (worker_line,) = re.findall(r'<polyline points="([^"]+)"[^>]*><title>worker pid 4242', page)
    assert worker_line.split()[-1] == ",".join(mark)  # at the line's last point
    assert "<title>worker pid 4242 (USS): died: native-crash, SIGSEGV</title>" in page
    assert page.count('class="end-mark"') == 1  # the main process did not die


def lab(color: str) -> tuple[float, float, float]:
    """CIELAB of an sRGB colour (D65), for distances a reader sees."""

    def linear(channel: int) -> float:
        value = channel / 255
        return ((value + 0.055) / 1.055) ** 2.4 if value > 0.04045 else value / 12.92

    r, g, b = (linear(int(color[i : i + 2], 16)) for i in (1, 3, 5))
    x = (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047
    y = 0.2126 * r + 0.7152 * g + 0.0722 * b
    z = (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883

    def f(t: float) -> float:
        return t ** (1 / 3) if t > 0.008856 else 7.787 * t + 16 / 116

    return (116 * f(y) - 16, 500 * (f(x) - f(y)), 200 * (f(y) - f(z)))


def test_the_palette_stays_distinct_to_32_workers() -> None:
    assert len(PALETTE) == 32 and len(set(PALETTE)) == 32
    closest = min(
        math.dist(lab(a), lab(b)) for n, a in enumerate(PALETTE) for b in PALETTE[n + 1 :]
    )
    assert closest > 25
    assert min(math.dist(lab(c), lab(INCIDENT_COLOR)) for c in PALETTE) > 15
    memory = sample_report().memory
    assert memory is not None
    memory.processes = [worker(5000 + n, [n, n + 1]) for n in range(32)]
    assert len({line.color for line in memory_lines(memory)}) == 32


def test_marker_labels_keep_clear_of_a_line_along_the_top() -> None:
    """A full /dev/shm runs along the plot's top edge, where labels go: they move down."""
    full = Line("/dev/shm used", [(0.0, 78.0), (10.0, 80.0)], "#6a3d9a")  # y axis ends at 80
    chart = Chart([full], 10.0, 1.0, "MiB", markers=[(2.0, "shm-exhausted #3")])
    box = layout(chart, 940, 240)
    ((_x, _anchor, _label, row),) = label_rows(box)
    top = label_baseline(box, row) - 11
    assert row == 1 and top > box.sy(78.0)  # the next row down, clear of the line
    quiet = Chart([Line("low", [(0.0, 1.0), (10.0, 2.0)], "#000")], 10.0, markers=chart.markers)
    assert [placed[3] for placed in label_rows(layout(quiet, 940, 240))] == [0]


def test_run_page_links_the_cause_page_relative_to_its_folder(tmp_path: Path) -> None:
    write_html(sample_report(), tmp_path)
    page = (tmp_path / "report.html").read_text()
    (href,) = re.findall(r'More: <a href="([^"]+)">docs/causes/native-crash.md</a>', page)
    assert not href.startswith(("file:", "/"))
    assert (tmp_path / href).resolve() == ROOT / "docs" / "causes" / "native-crash.md"


@pytest.mark.parametrize(("span", "step"), [(7.3, 2.0), (100.0, 20.0), (0.4, 0.1), (0, 1.0)])
def test_nice_step(span: float, step: float) -> None:
    assert nice_step(span) == pytest.approx(step)


@pytest.mark.parametrize(
    ("item", "samples"),
    [
        ((torch.zeros(4, 3, 2, 2), torch.arange(4)), 4),  # webdataset .batched(4), to_tuple
        ({"ids": torch.zeros(4, 512), "__key__": ["a", "b", "c", "d"]}, 4),
        ((torch.zeros(3, 8, 8), torch.tensor(1)), 1),  # one image and its label
        ({"ids": torch.zeros(512), "mask": torch.ones(512)}, 1),  # one text sample
        ((torch.zeros(3, 8, 8), "cat.jpg"), 1),
        (torch.zeros(4, 3), 1),  # a lone tensor: one sample, whatever its shape
    ],
)
def test_an_item_of_a_stream_without_batching_counts_its_own_batch(
    item: object, samples: int
) -> None:
    from loaderdoctor.supervise.batch_count import item_length

    assert item_length(item) == samples


def _report_json(**edits: object) -> dict[str, object]:
    document = RunReport(status="ok", command=["python", "x.py"], exit_code=0, duration_s=1.0)
    return {**document.to_dict(), **edits}


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ([1, 2], "expected a JSON object, got a list"),
        (None, "expected a JSON object, got null"),
        ({"schema": 1}, "report: no 'status'"),
        (
            _report_json(status="weird"),
            'report.status: expected "ok" or "crashed" or "healed" or "healed-with-loss", got '
            '"weird"',
        ),
        (_report_json(exit_code="0"), 'report.exit_code: expected an integer, got "0"'),
        (_report_json(duration_s=True), "report.duration_s: expected a number, got true"),
        (_report_json(incidents=[1]), "report.incidents[0]: expected an object, got 1"),
        (
            _report_json(incidents=[{"cause": "x", "action": "raised", "evidence": 3}]),
            "report.incidents[0].evidence: expected a list, got 3",
        ),
        (_report_json(delivered=5), "report.delivered: expected an object, got 5"),
        (_report_json(memory={"processes": []}), "report.memory: no 'interval_s'"),
        (
            _report_json(memory={"interval_s": 0.5, "shm_series": [[1.0]]}),
            "report.memory.shm_series[0]: expected a list of 2, got [1.0]",
        ),
    ],
)
def test_a_report_that_makes_no_sense_is_one_line_naming_the_field(
    document: object, message: str
) -> None:
    with pytest.raises(ValueError) as raised:
        RunReport.from_dict(document)
    assert str(raised.value) == message


@pytest.mark.slow
def test_loaderdoctor_report_refuses_a_damaged_report_in_one_line(tmp_path: Path) -> None:
    from conftest import run_python

    (tmp_path / "report.json").write_text(json.dumps(_report_json(incidents=[1])))
    result = run_python(["-m", "loaderdoctor", "report", str(tmp_path)], timeout=60)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"loaderdoctor report: error: {tmp_path / 'report.json'} is not a loaderdoctor run "
        "report: report.incidents[0]: expected an object, got 1"
    ]


IN_PROCESS = (
    "loaderdoctor supervises a StatefulDataLoader's worker processes; this one has "
    "num_workers=0 and loads in the main process with torchdata's own iterator: it runs as "
    "plain torchdata, unsupervised."
)
UNKNOWN_KEYWORD = (
    "loaderdoctor does not know the DataLoader keyword(s) in_order of this torch release: "
    "this DataLoader runs as plain torch, unsupervised."
)


def test_merge_sums_the_states_and_names_loaders_that_ran_as_plain_torch(tmp_path: Path) -> None:
    from loaderdoctor.runner import core, protocol

    directory = protocol.incidents_dir(tmp_path)
    Path(directory).mkdir()
    state = {"pid": 4000, "image": 1, "started": 1.0, "rank": None, "created": 2, "loaders": 2}
    protocol.write_json(
        protocol.state_path(directory, 4000, 1),
        {
            **state,
            "unsupervised": 3,
            "unsupervised_reasons": {IN_PROCESS: 2, UNKNOWN_KEYWORD: 1},
            "batches": 5,
            "samples": 20,
            "worker_pids": [4001, 4002],
        },
    )
    report = core.merge(
        tmp_path,
        command=["python", "x.py"],
        returncode=0,
        started_wall=0.0,
        duration_s=1.0,
        memory=None,
        interrupted=False,
    )
    assert report.delivered == Delivered(5, 20)
    assert [(r.pid, r.loaders, r.workers) for r in report.ranks] == [(4000, 2, 2)]
    assert report.notes == [
        f"2 DataLoader(s) ran unsupervised, their batches not in the delivered counts: {IN_PROCESS}",
        f"1 DataLoader(s) ran unsupervised, their batches not in the delivered counts: {UNKNOWN_KEYWORD}",
    ]


@pytest.mark.parametrize(
    ("change", "verdict"),
    [
        (
            {"action": "skipped"},
            "verdict: the command failed after 1 incident(s) (native-crash) were healed",
        ),
        (
            {"action": "skipped", "exit_code": 0, "status": "healed"},
            "verdict: 1 incident(s) healed (native-crash)",
        ),
        (
            {"action": "skipped", "exit_code": 0, "status": "healed-with-loss"},
            "verdict: 1 incident(s) healed, with healthy samples lost (native-crash)",
        ),
        (
            {"action": "skipped", "exit_code": 0, "status": "crashed", "delivered": Delivered()},
            "verdict: 1 incident(s) (native-crash), and not one sample delivered: nothing "
            "was healed",
        ),
        ({"incidents": []}, "verdict: no DataLoader worker died; the command failed on its own"),
        ({"incidents": [], "exit_code": 0}, "verdict: no DataLoader worker died"),
        (
            {"incidents": [], "exit_code": 130, "signal": "SIGINT"},
            "verdict: no DataLoader worker died",
        ),
    ],
)
def test_the_verdict_is_the_last_line(change: dict, verdict: str) -> None:
    """A log's reader looks at the end: the verdict, not the report's path."""
    report = sample_report()
    if "action" in change:
        report.incidents[0].action = change.pop("action")
    for name, value in change.items():
        setattr(report, name, value)
    assert format_text(report, width=120).splitlines()[-1] == verdict


ON = (
    "on: workers at oom_score_adj 900, samples re-tried alone at 1000, the training process at "
    "0: the OOM killer takes them first"
)
OFF = "off for 1 worker(s): oom_score_adj of pid 4102 not raised: [Errno 13] Permission denied"


def test_merge_says_whether_the_training_processes_go_last_when_memory_runs_out(
    tmp_path: Path,
) -> None:
    """Each rank's state carries its loaders' oom_protection line: report.json
    says it per process and once for the run, the weakest first, naming whose it is."""
    from loaderdoctor.runner import core, protocol

    directory = protocol.incidents_dir(tmp_path)
    Path(directory).mkdir()
    for pid, rank, line in ((4000, 0, ON), (4100, 1, OFF), (4200, 2, None)):
        state = {"pid": pid, "image": 1, "started": 1.0, "rank": rank, "created": 1, "loaders": 1}
        protocol.write_json(
            protocol.state_path(directory, pid, 1), {**state, "oom_protection": line}
        )

    def merged() -> dict:
        report = core.merge(
            tmp_path,
            command=["torchrun", "x.py"],
            returncode=0,
            started_wall=0.0,
            duration_s=1.0,
            memory=None,
            interrupted=False,
        )
        return json.loads(json.dumps(report.to_dict()))

    data = merged()
    assert [r["oom_protection"] for r in data["ranks"]] == [ON, OFF, None]
    assert data["oom_protection"] == f"process 4100 (rank 1): {OFF}"
    assert RunReport.from_dict(data).oom_protection == data["oom_protection"]
    Path(protocol.state_path(directory, 4100, 1)).unlink()
    assert merged()["oom_protection"] == ON  # the line every process says, as it says it


def test_the_summaries_show_the_oom_protection_as_the_loader_report_does() -> None:
    report = sample_report()
    assert "OOM protection" not in format_text(report, width=200)  # no worker ran: no line
    assert "OOM protection" not in format_html(report)
    report.oom_protection = ON
    assert f"  OOM protection: {ON}" in format_text(report, width=200).splitlines()
    assert f'<p class="meta">OOM protection: {ON}</p>' in format_html(report)
