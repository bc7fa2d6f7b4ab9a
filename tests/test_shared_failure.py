"""Healing stops on a failure every sample shares (or skips past ``max_skipped``): the detector
alone, then real runs whose every sample fails alike under ``loaderdoctor run --heal``."""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import pytest
import torch

from conftest import FIXTURES, run_python
from loaderdoctor import DataLoader
from loaderdoctor.supervise.errors import HealingStoppedError
from loaderdoctor.supervise.heal import HealWarning
from loaderdoctor.supervise.shared_failure import (
    GENERIC_CAUSE,
    Budget,
    SharedFailures,
    likely_cause,
    normalise,
    stop_diagnosis,
)


@pytest.mark.parametrize(
    ("exception_type", "message", "signature"),
    [
        ("FileNotFoundError", "FileNotFoundError: [Errno 2] No such file or directory: "
         "'/data/train/17.jpg'", "FileNotFoundError: [Errno <n>] No such file or directory: "
         "'<path>'"),
        ("RuntimeError", "index 12 is out of bounds for dimension 0 with size 10",
         "RuntimeError: index <n> is out of bounds for dimension <n> with size <n>"),
        ("ValueError", "bad pointer 0x7f3a12 at  C:\\data\\x.png",
         "ValueError: bad pointer <hex> at <path>"),
        (None, "boom", "Exception: boom"),
    ],
)  # fmt: skip
def test_normalise_masks_numbers_paths_and_addresses(
    exception_type: str | None, message: str, signature: str
) -> None:
    assert normalise(exception_type, message) == signature


@pytest.mark.parametrize(
    ("signature", "starts"),
    [
        ("RuntimeError: Found no NVIDIA driver on your system.", "CUDA used in the Dataset"),
        ("AssertionError: Torch not compiled with CUDA enabled", "CUDA used in the Dataset"),
        ("ModuleNotFoundError: No module named '<path>'", "an import every sample needs"),
        ("FileNotFoundError: [Errno <n>] No such file or directory: '<path>'",
         "a file root that does not exist"),
        ("PermissionError: [Errno <n>] Permission denied: '<path>'", "the data root cannot"),
        ("KeyError: 'label'", GENERIC_CAUSE),
    ],
)  # fmt: skip
def test_likely_cause_from_the_shared_message(signature: str, starts: str) -> None:
    assert likely_cause(signature).startswith(starts)


def test_a_streak_of_one_failure_with_nothing_delivered_stops() -> None:
    shared = SharedFailures(Budget(count=1000), dataset_len=1000, streak=3)
    assert shared.failed(5, "OSError", "OSError: cannot read /d/5.jpg") is None
    assert shared.failed(9, "OSError", "OSError: cannot read /d/9.jpg") is None
    stop = shared.failed(2, "OSError", "OSError: cannot read /d/2.jpg")
    assert stop is not None
    assert (stop.reason, stop.samples, stop.example) == (
        "shared",
        (5, 9, 2),
        "OSError: cannot read /d/5.jpg",
    )
    assert shared.failed(40, "KeyError", "x") is stop  # stopped for good


def test_a_delivery_or_another_failure_breaks_the_streak() -> None:
    shared = SharedFailures(Budget(count=1000), dataset_len=1000, streak=3)
    shared.failed(1, "OSError", "OSError: bad 1")
    shared.failed(2, "OSError", "OSError: bad 2")
    shared.delivered(4)
    shared.failed(3, "OSError", "OSError: bad 3")
    shared.failed(4, "KeyError", "KeyError: 'x'")
    shared.failed(5, "OSError", "OSError: bad 5")
    assert shared.failed(5, "OSError", "OSError: bad 5") is None  # the same sample again
    assert shared.stopped is None
    shared.delivered(0)  # an empty delivery breaks nothing
    assert shared.failed(6, "OSError", "OSError: bad 6") is None
    assert shared.failed(7, "OSError", "OSError: bad 7") is not None


def test_a_budget_of_every_sample_never_stops() -> None:
    shared = SharedFailures(Budget(fraction=1.0), dataset_len=10, streak=2)
    for index in range(10):
        assert shared.failed(index, "OSError", f"OSError: {index}") is None


def test_skips_past_the_budget_stop_with_the_most_common_failure() -> None:
    shared = SharedFailures(Budget(fraction=0.3), dataset_len=10, streak=8)
    for index, message in ((0, "KeyError: 'a'"), (3, "OSError: x 3"), (6, "OSError: x 6")):
        assert shared.failed(index, message.split(":")[0], message) is None
        shared.delivered(2)
    stop = shared.failed(9, "OSError", "OSError: x 9")
    assert stop is not None
    assert (stop.reason, stop.skipped, stop.limit, stop.signature, stop.samples) == (
        "budget",
        4,
        3,
        "OSError: x <n>",
        (0, 3, 6, 9),
    )


def test_a_fraction_of_a_stream_waits_for_enough_tried_samples() -> None:
    shared = SharedFailures(Budget(fraction=0.5), dataset_len=None, streak=100)
    for position in range(10):  # all of the 10 tried: too few to judge
        assert shared.failed(position, "OSError", f"OSError: {position}") is None
    shared.delivered(21)
    for position in range(10, 21):  # 21 of 42 tried
        assert shared.failed(position, "OSError", f"OSError: {position}") is None
    assert shared.failed(21, "OSError", "OSError: 21") is not None  # 22 of 43


@pytest.mark.parametrize(
    ("value", "budget"),
    [(3, Budget(count=3)), (0, Budget(count=0)), ("7", Budget(count=7)),
     (0.1, Budget(fraction=0.1)), ("1.0", Budget(fraction=1.0))],
)  # fmt: skip
def test_budget_parse(value: object, budget: Budget) -> None:
    assert Budget.parse(value) == budget


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (-1, "max_skipped must be 0 or more samples, got -1"),
        (1.5, "max_skipped must be a count or a fraction in (0, 1], got 1.5"),
        ("many", "max_skipped must be a count or a fraction in (0, 1], got 'many'"),
        (True, "max_skipped must be a count or a fraction in (0, 1], got True"),
    ],
)
def test_budget_refuses_nonsense_in_one_line(value: object, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        Budget.parse(value)
    assert str(caught.value) == message


def test_the_verdict_names_the_shared_message_and_the_samples_in_numeric_order() -> None:
    shared = SharedFailures(Budget(count=1000), dataset_len=1000, streak=3)
    for index in (100, 2, 10):
        stop = shared.failed(index, "RuntimeError", "RuntimeError: Found no NVIDIA driver")
    assert stop is not None
    diagnosis = stop_diagnosis(stop, epoch=0)
    assert diagnosis.cause == "shared-failure"
    assert diagnosis.evidence[:3] == [
        "3 different samples failed with the same error, with no sample delivered between: "
        "RuntimeError: Found no NVIDIA driver",
        f"likely cause: {likely_cause('CUDA')}",
        "samples: 2, 10, 100",
    ]


MESSAGES = {
    "cuda": "AssertionError: Torch not compiled with CUDA enabled",
    "missing-root": "FileNotFoundError: [Errno 2] No such file or directory: '/nonexistent/0.bin'",
}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("mode", "start_method"),
    [
        ("cuda", "spawn"),
        ("missing-root", "fork"),
        pytest.param("cuda", "fork", marks=pytest.mark.extended),
        pytest.param("missing-root", "spawn", marks=pytest.mark.extended),
    ],
)
def test_run_heal_stops_on_a_failure_every_sample_shares(
    tmp_path: Path, mode: str, start_method: str
) -> None:
    report_dir = tmp_path / "report"
    result = run_python(
        [
            "-m", "loaderdoctor", "run", "--heal", "--report-dir", str(report_dir), "--",
            sys.executable, str(FIXTURES / "run" / "shared_failure.py"), mode, start_method,
        ],
        timeout=120,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    assert "delivered" not in result.stdout
    report = json.loads((report_dir / "report.json").read_text())
    assert report["status"] == "crashed"
    assert report["quarantine"] == []  # the shared failure's samples are released
    assert report["delivered"] == {"batches": 0, "samples": 0}
    raised = [i for i in report["incidents"] if i["action"] == "raised"]
    assert [i["cause"] for i in raised] == ["shared-failure"]
    assert raised[0]["evidence"][0] == (
        "8 different samples failed with the same error, with no sample delivered between: "
        + MESSAGES[mode]
    )
    assert len(report["incidents"]) == 9  # eight skipped, then the stop
    assert result.stderr.splitlines()[-1] == (
        "verdict: shared-failure: Healing stopped: many samples fail alike, so the samples are "
        "not to blame"
    )


class _EveryOtherFails(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 20

    def __getitem__(self, index: int) -> int:
        if index % 2:
            raise KeyError(f"label of {index}")
        return index


def test_max_skipped_stops_an_in_process_loader_past_its_count() -> None:
    loader = DataLoader(_EveryOtherFails(), batch_size=2, heal=True, max_skipped=3)
    delivered: list[int] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", HealWarning)
        with pytest.raises(HealingStoppedError) as caught:
            for batch in loader:
                delivered.extend(int(i) for i in batch)
    assert delivered == [0, 2, 4]
    diagnosis = caught.value.diagnosis
    assert diagnosis is not None and diagnosis.evidence[:3] == [
        "4 samples were skipped, more than max_skipped=3 allows (3); the most common error: "
        "KeyError: 'label of 1'",
        f"likely cause: {GENERIC_CAUSE}",
        "samples: 1, 3, 5, 7",
    ]
    assert (
        str(caught.value).splitlines()[0]
        == "loaderdoctor stopped healing: KeyError: 'label of <n>'"
    )
    assert [(i.diagnosis.cause, i.action) for i in loader.incidents][-1] == (
        "shared-failure",
        "raised",
    )
    assert sorted(loader.report.quarantine) == [1, 3, 5, 7]  # not a streak: each failed alone


def test_on_error_skip_without_heal_skips_as_asked_and_heal_has_the_default_budget() -> None:
    assert DataLoader(_EveryOtherFails(), on_error="skip")._ld.shared is None
    assert DataLoader(_EveryOtherFails(), heal=True)._ld.shared.budget == Budget(fraction=0.5)
    with pytest.raises(ValueError) as caught:
        DataLoader(_EveryOtherFails(), heal=True, max_skipped=-2)
    assert str(caught.value) == "max_skipped must be 0 or more samples, got -2"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("options", "last_line"),
    [
        (["--max-skipped", "3"], "loaderdoctor run: error: --max-skipped is healing's budget: "
         "add --heal"),
        (["--heal", "--max-skipped", "1.5"], "loaderdoctor run: error: argument --max-skipped: "
         "max_skipped must be a count or a fraction in (0, 1], got 1.5"),
        (["--max-deaths-in-a-row", "3"], "loaderdoctor run: error: --max-deaths-in-a-row is "
         "healing's limit: add --heal"),
        (["--heal", "--max-deaths-in-a-row", "0"], "loaderdoctor run: error: argument "
         "--max-deaths-in-a-row: a whole number of worker deaths, 1 or more, not '0'"),
    ],
)  # fmt: skip
def test_run_refuses_a_max_skipped_it_cannot_use(
    tmp_path: Path, options: list[str], last_line: str
) -> None:
    result = run_python(
        ["-m", "loaderdoctor", "run", "--report-dir", str(tmp_path), *options, "--", "true"],
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == last_line
    assert not (tmp_path / "report.json").exists()


class _MissingRoot(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 64

    def __getitem__(self, index: int) -> int:
        raise FileNotFoundError(2, "No such file or directory", f"/nope/{index}.jpg")


@pytest.mark.slow
def test_stateful_dataloader_stops_healing_on_a_shared_failure_too() -> None:
    pytest.importorskip("torchdata")
    from loaderdoctor import StatefulDataLoader

    loader = StatefulDataLoader(_MissingRoot(), batch_size=4, num_workers=2, heal=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", HealWarning)
        with pytest.raises(HealingStoppedError) as caught:
            for _ in loader:
                pass
    assert str(caught.value).splitlines()[0] == (
        "loaderdoctor stopped healing: FileNotFoundError: [Errno <n>] No such file or directory: "
        "'<path>'"
    )
    assert caught.value.diagnosis is not None
    assert (
        caught.value.diagnosis.evidence[1] == f"likely cause: {likely_cause('FileNotFoundError:')}"
    )
    assert [(i.diagnosis.cause, i.action) for i in loader.incidents][-1] == (
        "shared-failure",
        "raised",
    )
    assert loader.report.quarantine == []
    del loader, caught  # torchdata's iterator ends before the interpreter's globals go


def test_inherited_state_names_what_workers_share_from_the_main_process() -> None:
    import multiprocessing
    import socket
    import threading

    from loaderdoctor.supervise.shared_failure import inherited_state

    class Holder:
        def __init__(self) -> None:
            self.slots = multiprocessing.BoundedSemaphore(3)
            self.free_lock = threading.Lock()
            self.held_lock = threading.Lock()
            self.nested = type("Reader", (), {})()
            self.nested.sock = socket.socket()
            self.name = "plain values are not suspects"

    holder = Holder()
    holder.slots.acquire()
    holder.held_lock.acquire()
    try:
        notes = inherited_state(holder)
    finally:
        holder.nested.sock.close()
    assert [note.split(",")[0] for note in notes] == [
        "self.slots",
        "self.held_lock",
        "self.nested.sock",
    ]
    assert notes[0].startswith(
        "self.slots, a multiprocessing.BoundedSemaphore shared by every worker: 1 of its 3 slots "
        "are taken now."
    )
    assert notes[2].startswith("self.nested.sock, a handle (socket) opened in the main process")


def test_a_verdict_that_blames_a_sample_names_inherited_state_once() -> None:
    from loaderdoctor.forensics.evidence import Diagnosis
    from loaderdoctor.supervise.shared_failure import suspect_inherited

    def verdict(cause: str) -> Diagnosis:
        return Diagnosis(
            cause=cause, title="t", confidence=0.85, worker_id=0, pid=1, signal=None,
            exit_code=None, indices=[3], evidence=["e"], fixes=["f"], explanation="x",
        )  # fmt: skip

    blamed = verdict("sample-error")
    suspect_inherited(blamed, ["self.db, a handle (sqlite3.Connection) ..."])
    suspect_inherited(blamed, ["self.db, a handle (sqlite3.Connection) ..."])
    assert [line for line in blamed.evidence if "self.db" in line] == [
        "the dataset holds what every worker inherits from the main process, which can fail "
        "every sample alike: self.db, a handle (sqlite3.Connection) ..."
    ]
    assert blamed.fixes[0].startswith("Before blaming the sample") and blamed.confidence == 0.6
    untouched = verdict("shm-exhausted")
    suspect_inherited(untouched, ["self.db, ..."])
    nothing = verdict("sample-error")
    suspect_inherited(nothing, [])
    assert untouched.evidence == nothing.evidence == ["e"] and nothing.confidence == 0.85
