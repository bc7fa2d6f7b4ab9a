"""Quarantine files and scan checkpoints: one check of every index, one line naming what is wrong."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import pytest

import loaderdoctor
from conftest import FIXTURES, run_python
from loaderdoctor.atomic import write_json_atomically
from loaderdoctor.scan.state import CheckpointError, Loaded, ScanState, load_checkpoint
from loaderdoctor.supervise.parent.quarantine import (
    InvalidIndex,
    QuarantineFileError,
    QuarantineWarning,
    read_quarantine,
    sample_index,
)

SCAN = FIXTURES / "scan" / "scan_datasets.py"


class Numbers:
    """A map-style dataset of ten numbers."""

    def __len__(self) -> int:
        return 10

    def __getitem__(self, index: int) -> int:
        return index


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (-1, "-1 is negative; indices count from 0"),
        (10**20, "100000000000000000000 is beyond any dataset (indices stop at 2**63 - 1)"),
        (True, "true is not an integer index"),
        ("5", '"5" is not an integer index'),
        (1.0, "1.0 is not an integer index"),
        (None, "null is not an integer index"),
    ],
)
def test_an_index_that_names_no_sample_is_refused(value: object, message: str) -> None:
    with pytest.raises(InvalidIndex) as raised:
        sample_index(value)
    assert str(raised.value) == message


def test_an_index_past_a_known_length_is_refused_and_zero_to_length_is_kept() -> None:
    assert [sample_index(i, 10) for i in (0, 9)] == [0, 9]
    with pytest.raises(InvalidIndex, match=r"^10 is past the end of a dataset of 10 samples$"):
        sample_index(10, 10)


def _write(path: Path, document: object) -> Path:
    path.write_text(json.dumps(document))
    return path


@pytest.mark.parametrize(
    ("document", "message"),
    [
        (
            {"schema": 1, "quarantine": [{"index": 3, "cause": "x"}, {"index": -1, "cause": "x"}]},
            'quarantine entry 1 ({"index": -1, "cause": "x"}): -1 is negative; indices count '
            "from 0; fix or delete the entry",
        ),
        (
            {"schema": 1, "quarantine": [10**20]},
            "quarantine entry 0 (100000000000000000000): 100000000000000000000 is beyond any "
            "dataset (indices stop at 2**63 - 1); fix or delete the entry",
        ),
        (
            {"schema": 1, "quarantine": [True]},
            "quarantine entry 0 (true): true is not an integer index; fix or delete the entry",
        ),
        (
            {"schema": 1, "quarantine": [{"cause": "x"}]},
            'quarantine entry 0 ({"cause": "x"}): no \'index\'; fix or delete the entry',
        ),
        (
            {"schema": 1, "quarantine": [{"index": 2, "evidence": "SIGSEGV"}]},
            'quarantine entry 0 ({"index": 2, "evidence": "SIGSEGV"}): \'evidence\' must be a '
            "list of strings",
        ),
        (
            {"schema": 1, "quarantine": [{"index": 2, "cause": 7}]},
            'quarantine entry 0 ({"index": 2, "cause": 7}): \'cause\' must be a str, got 7',
        ),
        ({"schema": 99, "quarantine": []}, "quarantine file schema 99; this loaderdoctor reads 1"),
        (
            {"schema": True, "quarantine": []},
            "quarantine file schema True; this loaderdoctor reads 1",
        ),
    ],
)
def test_a_quarantine_entry_that_makes_no_sense_is_one_line_naming_it(
    tmp_path: Path, document: object, message: str
) -> None:
    path = _write(tmp_path / "q.json", document)
    with pytest.raises(QuarantineFileError) as raised:
        read_quarantine(path)
    assert str(raised.value) == f"{str(path)!r}: {message}"
    with pytest.raises(QuarantineFileError):  # the loader refuses it the same way
        loaderdoctor.DataLoader(Numbers(), quarantine=path)


def test_a_hand_written_quarantine_without_schema_or_causes_is_read(tmp_path: Path) -> None:
    path = _write(tmp_path / "q.json", {"quarantine": [4, {"index": 7, "future": 1}]})
    entries = read_quarantine(path)
    assert {i: e.cause for i, e in entries.items()} == {4: "unknown", 7: "unknown"}


def test_indices_past_the_end_warn_once_that_the_file_may_be_another_datasets(
    tmp_path: Path,
) -> None:
    path = _write(tmp_path / "q.json", {"schema": 1, "quarantine": [3, 12, 40, 41, 99]})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = loaderdoctor.DataLoader(Numbers(), batch_size=2, quarantine=path)
        loaderdoctor.DataLoader(Numbers(), batch_size=2, quarantine=path)
    messages = [str(w.message) for w in caught if issubclass(w.category, QuarantineWarning)]
    assert messages == [
        f"quarantine file {str(path)!r} names 4 indices past the end of this dataset of 10 "
        "samples (12, 40, 41, ...): the file may belong to another dataset"
    ]
    # Kept, not refused: they skip nothing, and the samples in range are still never fetched.
    assert [int(x) for batch in first for x in batch] == [0, 1, 2, 4, 5, 6, 7, 8, 9]


# --- scan checkpoints: the same check -----------------------------------------------------------
def _checkpoint(**edits: object) -> dict[str, object]:
    state = ScanState("d.py:train", 10)
    state.loaded[0] = Loaded(0.5, "Tensor[float32](3,)", 4096)
    document = state.to_dict()
    document.update(edits)
    return document


def _bad(index: object) -> dict[str, object]:
    return {"index": index, "cause": "sample-error", "file": None, "message": "x", "evidence": []}


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ([1, 2, 3], "not a scan checkpoint (a list, not an object)"),
        (_checkpoint(schema=99), "checkpoint schema 99; this loaderdoctor reads 1"),
        (
            _checkpoint(loaded=[[-2, 0.1, 0, 1]]),
            "'loaded' entry 0 ([-2, 0.1, 0, 1]): -2 is negative; indices count from 0",
        ),
        (
            _checkpoint(bad=[_bad(3), _bad(10**20)]),
            "'bad' entry 1: 100000000000000000000 is beyond any dataset (indices stop at 2**63 - 1)",
        ),
        (
            _checkpoint(bad=[_bad(10)]),
            "'bad' entry 0: 10 is past the end of a dataset of 10 samples",
        ),
        (
            _checkpoint(bad=[_bad(True)]),
            "'bad' entry 0: true is not an integer index",
        ),
        (_checkpoint(loaded=[[1, 0.1, 5, 1]]), "'loaded' entry 0 ([1, 0.1, 5, 1]): no structure 5"),
        (_checkpoint(total="10"), "'total' is \"10\", not an integer"),
        (_checkpoint(bad={}), "'bad' is {}, not a list"),
    ],
)
def test_a_checkpoint_that_makes_no_sense_is_one_line_naming_the_entry(
    tmp_path: Path, document: object, message: str
) -> None:
    path = _write(tmp_path / "c.json", document)
    with pytest.raises(CheckpointError) as raised:
        load_checkpoint(path, "d.py:train", 10)
    assert str(raised.value) == f"checkpoint {path}: {message}; delete it to start over"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("document", "message"),
    [
        ([1, 2, 3], "not a scan checkpoint (a list, not an object)"),
        (
            {
                "schema": 1, "spec": f"{SCAN}:clean", "total": 200, "structures": ["T"],
                "loaded": [], "bad": [_bad(5), _bad(-2), _bad(10**20)],
            },
            "'bad' entry 1: -2 is negative; indices count from 0",
        ),
    ],
)  # fmt: skip
def test_scan_resume_refuses_a_checkpoint_that_makes_no_sense(
    tmp_path: Path, document: object, message: str
) -> None:
    checkpoint = _write(tmp_path / "q.checkpoint.json", document)
    result = run_python(
        ["-m", "loaderdoctor", "scan", f"{SCAN}:clean", "--out", "q.json", "--resume"],
        timeout=60,
        cwd=str(tmp_path),
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [
        f"loaderdoctor scan: error: checkpoint {checkpoint.name}: {message}; delete it to start over"
    ]
    assert not (tmp_path / "q.json").exists()  # nothing copied into a new quarantine


def test_the_atomic_writer_follows_a_symlink_and_never_replaces_what_is_not_a_file(
    tmp_path: Path,
) -> None:
    real = tmp_path / "elsewhere" / "q.json"
    real.parent.mkdir()
    real.write_text("{}")
    link = tmp_path / "q.json"
    link.symlink_to(real)
    write_json_atomically(link, {"schema": 1, "quarantine": []})
    assert link.is_symlink() and json.loads(real.read_text()) == {"schema": 1, "quarantine": []}
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="not a regular file"):
        write_json_atomically(fifo, {})
    assert fifo.is_fifo()
