"""Hostile input and a hostile report folder, without starting a process: each case is a real
file (a FIFO made with mkfifo, JSON nested 100 000 deep, binary bytes), a real lock, or the data
a killed run leaves on disk. The same cases with real kills and real mounts: test_hostile.py."""

from __future__ import annotations

import fcntl
import json
import os
import sys
import time
from pathlib import Path

import pytest

from loaderdoctor.cli import main
from loaderdoctor.cli.explain import looks_binary
from loaderdoctor.inputfile import InputFileError, load_json
from loaderdoctor.report.run_text import format_headline, format_verdict
from loaderdoctor.runner import journal
from loaderdoctor.runner.core import RunRecord, RunUsageError, UnwrittenFiles, write_report
from loaderdoctor.runner.model import RunReport
from loaderdoctor.runner.protocol import INCIDENTS_DIRNAME, LOCK_NAME, REPORT_NAME, RUN_RECORD_NAME
from loaderdoctor.scan.findings import length_hint
from loaderdoctor.scan.job import ScanUsageError, checked_length
from loaderdoctor.scan.model import BadSample, ScanReport
from loaderdoctor.spec import SpecError, dataset_length
from loaderdoctor.tune.model import Bound, Budget, LoaderConfig, Soak, Trial, TuneReport

NESTED = "[" * 100_000 + "]" * 100_000


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(argv)
    return code, capsys.readouterr().err


# --- files that are not what they say -----------------------------------------------------------
def test_a_fifo_is_refused_before_it_can_block(tmp_path: Path) -> None:
    fifo = tmp_path / "report.json"
    os.mkfifo(fifo)
    started = time.monotonic()
    with pytest.raises(InputFileError, match=r"is a FIFO \(named pipe\), not a file$"):
        load_json(fifo)
    assert time.monotonic() - started < 1


def test_json_nested_past_the_parser_stack_is_an_input_error(tmp_path: Path) -> None:
    path = tmp_path / "deep.json"
    path.write_text(NESTED)
    with pytest.raises(InputFileError, match=r"^JSON nested too deeply"):
        load_json(path)


@pytest.mark.parametrize("where", ["folder", "file"])
def test_report_of_a_fifo_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str
) -> None:
    os.mkfifo(tmp_path / REPORT_NAME)
    target = tmp_path if where == "folder" else tmp_path / REPORT_NAME
    path = tmp_path / REPORT_NAME
    assert run_cli(["report", str(target)], capsys) == (
        2,
        f"loaderdoctor report: error: cannot read {path}: {path} is a FIFO (named pipe), not a "
        "file\n",
    )


def test_report_of_nested_json_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / REPORT_NAME).write_text(NESTED)
    path = tmp_path / REPORT_NAME
    assert run_cli(["report", str(tmp_path)], capsys) == (
        2,
        f"loaderdoctor report: error: cannot read {path}: JSON nested too deeply to be one of "
        "loaderdoctor's files\n",
    )


def test_explain_with_stdin_closed_is_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "stdin", None)  # what Python sets when descriptor 0 is closed
    assert run_cli(["explain"], capsys) == (
        2,
        "loaderdoctor explain: error: standard input is closed: give LOGFILE, or pipe the log "
        "in (python train.py 2>&1 | loaderdoctor explain -)\n",
    )


def test_explain_of_binary_input_is_one_line_at_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "core"
    path.write_bytes(bytes(range(256)) * 4_000)  # 1 MB with NULs, as a core dump has
    started = time.monotonic()
    assert run_cli(["explain", str(path)], capsys) == (
        2,
        f"loaderdoctor explain: error: {path} is binary (NUL bytes in its first 64.0 KiB), not a "
        "log: give the text the failed run printed (python train.py 2>&1 | tee train.log)\n",
    )
    assert time.monotonic() - started < 2


def test_utf16_logs_are_text_binary_is_not() -> None:
    assert not looks_binary("worker exited\n".encode("utf-16"))  # with its byte-order mark
    assert not looks_binary("worker exited\n".encode("utf-16-le"))  # without
    assert not looks_binary(b"plain text\n")
    assert looks_binary(b"\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x03\x00")


# --- datasets whose __len__ raises, lies or is absurd ---------------------------------------------
class Sized:
    def __init__(self, length: object) -> None:
        self.length = length

    def __len__(self) -> int:
        if isinstance(self.length, Exception):
            raise self.length
        return self.length  # type: ignore[return-value]

    def __getitem__(self, index: int) -> int:
        return index


@pytest.mark.parametrize(
    ("length", "message"),
    [
        (RuntimeError("boom"), "ds.py:d: its __len__ raised RuntimeError: boom"),
        (-5, "ds.py:d: its __len__ returned -5; a length is 0 or more"),
        (10.5, "ds.py:d: its __len__ returned 10.5 (a float), not a whole number of samples"),
        (True, "ds.py:d: its __len__ returned True (a bool), not a whole number of samples"),
    ],
)
def test_a_len_that_raises_or_lies_is_the_users(length: object, message: str) -> None:
    with pytest.raises(SpecError) as raised:
        dataset_length(Sized(length), "ds.py:d")
    assert str(raised.value).startswith(message)


def test_an_absurd_len_is_refused_before_any_list_is_made() -> None:
    with pytest.raises(ScanUsageError, match=r"^ds.py:d: its __len__ says 4611686018427387904 "):
        checked_length(Sized(2**62), "ds.py:d")
    assert checked_length(Sized(10), "ds.py:d") == 10


def scan_report(total: int, bad: dict[int, str]) -> ScanReport:
    return ScanReport(
        spec="ds.py:d",
        total=total,
        scanned=total - len(bad),
        bad=[BadSample(i, "sample-error", None, message) for i, message in sorted(bad.items())],
        outliers=[],
        slowest=[],
        seconds=1.0,
        num_workers=2,
    )


def test_index_errors_from_one_index_to_the_end_point_at_len() -> None:
    report = scan_report(30, {i: f"IndexError: {i}" for i in range(20, 30)})
    assert length_hint(report) == (
        "every index from 20 to 29 raised IndexError and none before it did: the dataset's "
        "__len__ says 30, __getitem__ holds 20; fix __len__ (those samples are in the "
        "quarantine file meanwhile)"
    )
    assert length_hint(scan_report(30, {5: "IndexError: 5", 29: "IndexError: 29"})) is None
    assert length_hint(scan_report(30, {29: "ValueError: bad"})) is None


# --- tune recommends only what every check passed ------------------------------------------------
def tune_trial(workers: int, rate: float, status: str = "ok") -> Trial:
    return Trial(LoaderConfig.make(workers, 2), "workers", status=status, samples_per_s=rate)  # type: ignore[arg-type]


def test_tune_never_picks_a_configuration_a_trial_ruled_out() -> None:
    from loaderdoctor.tune.search import SearchSettings, pick_from

    trials = [
        tune_trial(0, 100),
        tune_trial(2, 300),
        tune_trial(4, 500),
        tune_trial(4, 0, "does-not-fit"),  # its repeat went past the budget
        tune_trial(8, 510),  # more workers than a configuration that does not fit
    ]
    assert pick_from(trials, SearchSettings(8)) == (LoaderConfig.make(2, 2), 300)


def test_tune_falls_back_to_fewer_workers_or_recommends_nothing_after_a_failed_soak() -> None:
    from loaderdoctor.report.tune import format_nothing_fits
    from loaderdoctor.tune.core import _next_candidate

    trials = [
        tune_trial(1, 200),
        tune_trial(2, 300),
        tune_trial(2, 0, "aborted"),
        tune_trial(4, 500),
    ]
    assert _next_candidate(trials, LoaderConfig.make(4, 2)) == (LoaderConfig.make(1, 2), 200)
    assert _next_candidate(trials, LoaderConfig.make(1, 2)) is None
    report = _tune_report(trials, Soak([], 0.0, 0.0, [], 0, "epoch 1: 1.2 GiB in use > budget"))
    assert format_nothing_fits(report) == (
        "nothing passed every check: workers=4 prefetch=2, the pick of the trials, stopped in "
        "its soak (epoch 1: 1.2 GiB in use > budget); raise --mem-budget, or lower "
        "--batch-size, or tune with fewer --max-workers"
    )


def test_a_failed_soak_gives_way_to_fewer_workers_only_if_they_pass_theirs() -> None:
    from loaderdoctor.tune.core import _soaked

    trials = [tune_trial(1, 200), tune_trial(2, 300), tune_trial(4, 500)]
    four, two = LoaderConfig.make(4, 2), LoaderConfig.make(2, 2)
    over = Soak([], 0.0, 0.0, [], 0, "epoch 1: 1.2 GiB in use > budget 1.2 GiB")
    passed = Soak([], 290.0, 0.0, [], 0, None)

    notes: list[str] = []
    outcome = _soaked(trials, four, 500, notes, {four: over, two: passed}.get)
    assert outcome == (two, passed, 300)
    assert notes == [
        "workers=4 prefetch=2 stopped in its soak (epoch 1: 1.2 GiB in use > budget 1.2 GiB); "
        "workers=2 prefetch=2 passed it and is recommended instead"
    ]
    notes = []
    assert _soaked(trials, four, 500, notes, {four: over, two: over}.get) == (four, over, 500)
    assert notes[0].endswith(
        "; so did workers=2 prefetch=2 (epoch 1: 1.2 GiB in use > budget 1.2 GiB)"
    )


def _tune_report(trials: list[Trial], soak: Soak) -> TuneReport:
    return TuneReport(
        spec="ds.py:d",
        batch_size=8,
        dataset_length=100,
        usable_cores=2,
        max_workers=4,
        cuda=False,
        budget=Budget(1 << 30, None, "test"),
        trials=trials,
        skipped=[],
        recommended=LoaderConfig.make(4, 2),
        recommended_samples_per_s=500,
        bound=Bound("cpu", "t"),
        startup=None,
        seconds=1.0,
        grid_size=9,
        stop_reason="done",
        soak=soak,
    )


# --- the report folder: one run at a time, and a killed run's report made from its journal -------
def journal_dir(tmp_path: Path, *, returncode: int | None, batches: int = 18) -> Path:
    """What a run killed after its command ended leaves: the placeholder report, the journal
    (with the command's exit status), a process's state with its counts, the lock file."""
    incidents = tmp_path / INCIDENTS_DIRNAME
    incidents.mkdir(parents=True)
    (tmp_path / LOCK_NAME).touch()
    record = RunRecord(4242, ["python", "train.py"], time.time() - 5, returncode=returncode)
    (incidents / RUN_RECORD_NAME).write_text(json.dumps(record.to_dict()))
    state = {"pid": 4343, "image": 1, "created": 1, "loaders": 1, "batches": batches,
             "samples": batches * 4, "started": time.time() - 4}  # fmt: skip
    (incidents / "4343-1.state.json").write_text(json.dumps(state))
    placeholder = journal._made_again(tmp_path, RunRecord(4242, ["python", "train.py"], 0), None)
    write_report(placeholder, tmp_path)
    return tmp_path


def test_a_run_killed_after_its_command_succeeded_reports_the_success(tmp_path: Path) -> None:
    folder = journal_dir(tmp_path, returncode=0)
    assert journal.settle(folder) is not None
    report = RunReport.from_dict(json.loads((folder / REPORT_NAME).read_text()))
    assert (report.status, report.exit_code, report.exit_known) == ("ok", 0, True)
    assert (report.delivered.batches, report.delivered.samples, report.supervisor) == (
        18,
        72,
        "died",
    )
    assert report.notes[0] == (
        "loaderdoctor run (pid 4242) did not finish its report (run saw its command end); this "
        "one was made afterwards from what the run and its command's processes wrote (memory "
        "was not sampled)"
    )
    assert not (folder / INCIDENTS_DIRNAME).exists()


def test_a_run_killed_before_its_command_ended_claims_no_exit_status(tmp_path: Path) -> None:
    folder = journal_dir(tmp_path, returncode=None)
    report = journal.settle(folder)
    assert report is not None
    assert (report.status, report.exit_code, report.exit_known) == ("crashed", -1, False)
    assert report.delivered.batches == 18
    assert format_headline(report).startswith(
        "loaderdoctor run did not finish, and nothing saw the command end: its exit status is "
        "unknown (it ran at least "
    )
    assert format_verdict(report) == (
        "verdict: unknown: the run's end was not seen; no worker death recorded"
    )


def test_damaged_records_are_left_out_of_the_report_not_a_crash(tmp_path: Path) -> None:
    folder = journal_dir(tmp_path, returncode=0)
    incidents = folder / INCIDENTS_DIRNAME
    (incidents / "5-1.state.json").write_text('{"pid": "x", "batches": 3}')
    (incidents / "6-1.state.json").write_text('{"pid": 6, "batches": [], "created": 1}')
    (incidents / "7-1.state.json").write_text(NESTED)
    (incidents / "7.jsonl").write_text(
        '{"time": "noon", "incident": {}}\n{"incident": 5}\n{"incident": {"indices": 3}}\n'
        + NESTED
        + "\n"
    )
    report = journal.settle(folder)
    assert report is not None
    assert (report.delivered.batches, report.incidents, report.status) == (18, [], "ok")


def test_report_dir_settles_a_dead_runs_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = journal_dir(tmp_path, returncode=0)
    assert main(["report", str(folder), "--no-html"]) == 0
    out = capsys.readouterr().out
    assert "loaderdoctor run: the command succeeded: exit code 0 after" in out
    assert not (folder / INCIDENTS_DIRNAME).exists()


def test_a_live_runs_folder_is_refused_to_a_second_run(tmp_path: Path) -> None:
    folder = journal_dir(tmp_path, returncode=None)
    holder = os.open(folder / LOCK_NAME, os.O_RDWR)
    try:
        fcntl.flock(holder, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(RunUsageError) as refused:
            journal.claim(folder, Path("out"))
        assert str(refused.value).startswith(
            "--report-dir out is in use by loaderdoctor run (pid 4242, started "
        )
        assert str(refused.value).endswith("): wait for it to end, or pass another --report-dir")
        assert journal.live_run(folder)
        live = journal.snapshot(folder)
        assert live is not None and live.delivered.batches == 18
        assert format_headline(live).startswith("the command is still running (for ")
        assert format_verdict(live) == (
            "verdict: not yet: the run goes on; no worker death recorded so far"
        )
        assert main(["report", "--no-html", str(folder)]) == 1
        assert (folder / INCIDENTS_DIRNAME).is_dir()  # a live run's records are never touched
    finally:
        os.close(holder)
    held = journal.claim(folder, Path("out"))  # the holder is gone: taken over
    try:
        assert held.taken_over is not None and held.taken_over.delivered.batches == 18
        assert not (folder / INCIDENTS_DIRNAME).exists()
    finally:
        held.release()


def test_unwritten_files_are_one_warning_line_and_a_note(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    unwritten = UnwrittenFiles(tmp_path)

    def full() -> None:
        raise OSError(28, "No space left on device")

    assert not unwritten.attempt("run.json", full)
    assert not unwritten.attempt("report.json", full)
    assert unwritten.attempt("report.html", lambda: None)
    assert capsys.readouterr().err == (
        f"loaderdoctor run: warning: cannot write run.json in {tmp_path} (No space left on "
        "device); the command's outcome and exit status stay its own\n"
    )
    assert unwritten.notes() == [
        f"not written in {tmp_path}: run.json (No space left on device), report.json (No space "
        "left on device); the counts and incidents are those the command's processes could "
        f"write before: they may be short; what the command's processes wrote is kept in "
        f".incidents/: once the folder can be written, loaderdoctor report {tmp_path} makes the "
        "report"
    ]


# --- every command, every kind of hostile input: never "internal error" ----------------------
DATASET = "import torch\nclass D(torch.utils.data.Dataset):\n    def __len__(self):\n        return 4\n    def __getitem__(self, i):\n        return torch.zeros(2)\nd = D()\n"  # fmt: skip


def hostile_input(folder: Path, kind: str) -> Path:
    """A path of the given kind: what a user may well pass by mistake, or a disk may hold."""
    path = folder / f"input-{kind}.py"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "nested":
        path.write_text(NESTED)
    elif kind == "empty":
        path.write_text("")
    elif kind == "binary":
        path.write_bytes(bytes(range(256)) * 64)
    elif kind == "folder":
        path.mkdir()
    elif kind == "truncated":
        path.write_text('{"schema": 1, "status": "ok", "incidents": [')
    return path  # "missing": nothing there


@pytest.mark.parametrize(
    "kind", ["fifo", "nested", "empty", "binary", "folder", "truncated", "missing"]
)
@pytest.mark.parametrize(
    "command",
    [
        ["report", "{path}"],
        ["explain", "{path}"],
        ["lint", "{path}"],
        ["scan", "{path}:d", "--out", "{tmp}/q.json"],
        ["tune", "{path}:d", "--batch-size", "2"],
        ["tune", "{tmp}/ds.py:d", "--batch-size", "2", "--quarantine", "{path}"],
        ["scan", "{tmp}/ds.py:d", "--resume", "--checkpoint", "{path}", "--out", "{tmp}/q.json"],
    ],
    ids=["report", "explain", "lint", "scan-spec", "tune-spec", "tune-quarantine", "scan-resume"],
)
def test_no_hostile_input_is_an_internal_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str], kind: str
) -> None:
    (tmp_path / "ds.py").write_text(DATASET)
    path = hostile_input(tmp_path, kind)
    argv = [part.format(path=path, tmp=tmp_path) for part in command]
    started = time.monotonic()
    code = main(argv)
    err = capsys.readouterr().err
    assert "internal error" not in err and "Traceback" not in err, err
    assert code in (0, 1, 2), err
    if code == 2:  # an input error is one line naming what to fix
        assert len(err.splitlines()) == 1 and err.startswith(f"loaderdoctor {argv[0]}: error: ")
    assert time.monotonic() - started < 10
