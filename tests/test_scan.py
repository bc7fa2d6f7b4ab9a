"""``loaderdoctor scan``: planted faults of every kind are found, named and quarantined exactly."""

from __future__ import annotations

import fnmatch
import importlib.util
import io
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

from conftest import FIXTURES, run_python
from loaderdoctor.report.scan import format_json, format_summary, print_text
from loaderdoctor.scan import (
    BadSample,
    Outlier,
    ScanReport,
    SlowSample,
    describe,
    quarantine_entries,
    scan_dataset,
)
from loaderdoctor.scan.images import ImageFolderScan
from loaderdoctor.supervise.parent.quarantine import read_quarantine

SCAN = FIXTURES / "scan" / "scan_datasets.py"


def _import_fixture() -> ModuleType:
    spec = importlib.util.spec_from_file_location("scan_datasets", SCAN)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["scan_datasets"] = module  # picklable classes, as the spec loader does
    spec.loader.exec_module(module)
    return module


datasets = _import_fixture()


def sample_report() -> ScanReport:
    return ScanReport(
        spec="data.py:train",
        total=10,
        scanned=8,
        bad=[
            BadSample(3, "sample-error", "/d/3.jpg", "ValueError: bad [record]", ["e1"]),
            BadSample(7, "native-crash", None, "The worker crashed in native code", []),
        ],
        outliers=[Outlier(5, "Tensor[float32](2, 5)", "Tensor[float32](3, 4)", None)],
        slowest=[SlowSample(1, 0.0125, "/d/1.jpg")],
        seconds=2.0,
        num_workers=2,
        structure="Tensor[float32](3, 4)",
    )


# --- unit: data in, exact output --------------------------------------------------------------
def test_describe_names_what_default_collate_compares() -> None:
    assert describe(torch.zeros(3, 4)) == "Tensor[float32](3, 4)"
    assert describe({"y": 1, "x": torch.zeros(2, dtype=torch.uint8)}) == (
        "{'x': Tensor[uint8](2,), 'y': int}"
    )
    assert describe((1.0, "a", None)) == "tuple(float, str, NoneType)"
    assert describe(list(range(100))) == "list[100 x int]"


def test_report_round_trips_through_json() -> None:
    report = sample_report()
    data = json.loads(format_json(report))
    assert data["schema"] == 2 and data["throughput"] == 5.0
    assert [bad["index"] for bad in data["bad"]] == [3, 7]
    assert ScanReport.from_dict(data) == report


def test_text_renderer_keeps_brackets_and_names_files() -> None:
    out = io.StringIO()
    print_text(sample_report(), out, quarantine_path="q.json")
    text = out.getvalue()
    assert text.splitlines()[0] == format_summary(sample_report())
    assert format_summary(sample_report()) == (
        "scanned 10 samples in 2.0 s (5.0 samples/s, 2 workers): 2 bad, 1 outliers"
    )
    for expected in ("ValueError: bad [record]", "/d/3.jpg", "Tensor[float32](2, 5)", "12.5"):
        assert expected in text
    assert "quarantine written to q.json" in text


def test_quarantine_entries_carry_cause_evidence_and_file(tmp_path: Path) -> None:
    entries = quarantine_entries(sample_report())
    assert sorted(entries) == [3, 7]
    assert entries[3].cause == "sample-error" and entries[3].file == "/d/3.jpg"
    assert entries[3].evidence == ["ValueError: bad [record]", "e1"]


def test_image_dataset_flags_a_decompression_bomb(tmp_path: Path) -> None:
    from PIL import Image

    Image.new("L", (40, 40)).save(tmp_path / "big.png")
    dataset = ImageFolderScan(tmp_path, max_pixels=1000)
    with pytest.raises(Image.DecompressionBombError):
        dataset[0]
    assert ImageFolderScan(tmp_path)[0][1:] == ((40, 40), "L")


# --- integration: real workers, real faults ---------------------------------------------------
@pytest.mark.slow
def test_scan_finds_each_planted_fault_exactly() -> None:
    report = scan_dataset(datasets.Planted(), num_workers=2, timeout=1.5)
    causes = {bad.index: bad.cause for bad in report.bad}
    assert causes == {
        datasets.EXCEPTION_AT: "sample-error",
        datasets.CRASH_AT: "native-crash",
        datasets.HANG_AT: "worker-hang",
    }
    assert [o.index for o in report.outliers] == [datasets.ODD_AT]  # loads, so not quarantined
    assert report.outliers[0].structure == "Tensor[float32](2, 5)"
    assert report.structure == "Tensor[float32](3, 4)"
    assert report.total == datasets.LENGTH and report.scanned == datasets.LENGTH - 3
    assert len(report.slowest) == 5


@pytest.mark.slow
def test_clean_scan_and_quarantine_is_read_by_the_loader(tmp_path: Path) -> None:
    from loaderdoctor import DataLoader
    from loaderdoctor.supervise.parent.quarantine import write_quarantine

    clean = scan_dataset(datasets.Clean(length=40, sleep_s=0), num_workers=2, timeout=30)
    assert clean.clean and not clean.outliers and clean.scanned == 40

    bad = ScanReport("x", 20, 18, [BadSample(3, "sample-error", None, "m")], [], [], 1.0, 2)
    bad.bad.append(BadSample(7, "native-crash", None, "m"))
    path = tmp_path / "q.json"
    write_quarantine(path, quarantine_entries(bad))
    loader = DataLoader(
        datasets.Planted(hang=False), batch_size=None, num_workers=0, quarantine=path
    )
    seen = [int(sample.flatten()[0]) for sample in loader]
    assert 3 not in seen and 7 not in seen and len(seen) == datasets.LENGTH - 2


@pytest.mark.slow
def test_cli_scan_of_planted_faults_writes_quarantine(tmp_path: Path) -> None:
    out = tmp_path / "quarantine.json"
    command = ["-m", "loaderdoctor", "scan", f"{SCAN}:planted", "--timeout", "1.5"]
    result = run_python([*command, "--out", str(out), "--json"], timeout=60)
    assert result.returncode == 1, result.stderr
    data = json.loads(result.stdout)
    planted = {datasets.EXCEPTION_AT, datasets.CRASH_AT, datasets.HANG_AT}
    assert {bad["index"] for bad in data["bad"]} == planted
    assert [o["index"] for o in data["outliers"]] == [datasets.ODD_AT]
    assert set(read_quarantine(out)) == planted
    assert read_quarantine(out)[datasets.CRASH_AT].cause == "native-crash"


def write_image_folder(root: Path) -> dict[str, Path]:
    """Good images plus one planted fault of each kind; returns the corrupt files by kind."""
    from PIL import Image

    root.mkdir()
    for number in range(6):
        Image.new("RGB", (16, 12), (number * 40, 0, 0)).save(root / f"good{number}.png")
        Image.new("RGB", (16, 12)).save(root / f"good{number}.jpg", quality=90)
    corrupt = {
        "zero": root / "empty.jpg",
        "truncated": root / "truncated.jpg",
        "crc": root / "badcrc.png",
        "text": root / "notes.jpg",
    }
    corrupt["zero"].write_bytes(b"")
    buffer = io.BytesIO()
    Image.new("RGB", (64, 64), "blue").save(buffer, "JPEG")
    corrupt["truncated"].write_bytes(buffer.getvalue()[:300])
    png = bytearray((root / "good0.png").read_bytes())
    idat = png.find(b"IDAT")
    length = int.from_bytes(png[idat - 4 : idat], "big")
    png[idat + 4 + length] ^= 0xFF  # first byte of the IDAT chunk's CRC
    corrupt["crc"].write_bytes(bytes(png))
    corrupt["text"].write_text("this is not a JPEG\n")
    return corrupt


@pytest.mark.slow
def test_cli_scan_of_an_image_folder_quarantines_exactly_the_corrupt_files(
    tmp_path: Path,
) -> None:
    corrupt = write_image_folder(tmp_path / "images")
    files = [path for path, _ in ImageFolderScan(tmp_path / "images").samples]
    expected = {files.index(str(path)) for path in corrupt.values()}
    out = tmp_path / "q.json"
    result = run_python(
        ["-m", "loaderdoctor", "scan", str(tmp_path / "images"), "--out", str(out), "--json"],
        timeout=60,
    )
    assert result.returncode == 1, result.stderr
    data = json.loads(result.stdout)
    assert data["total"] == 16
    assert {bad["index"] for bad in data["bad"]} == expected
    assert {bad["file"] for bad in data["bad"]} == {str(path) for path in corrupt.values()}
    assert all(bad["cause"] == "sample-error" for bad in data["bad"])
    quarantine = read_quarantine(out)
    assert set(quarantine) == expected
    assert {entry.file for entry in quarantine.values()} == {str(p) for p in corrupt.values()}


@pytest.mark.slow
def test_cli_clean_scan_exits_zero_and_writes_no_file(tmp_path: Path) -> None:
    result = run_python(
        ["-m", "loaderdoctor", "scan", f"{SCAN}:clean", "--out", str(tmp_path / "q.json")],
        env={"SCAN_TEST_LENGTH": "30"},
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("scanned 30 samples in ")
    assert ": clean, 0 outliers" in result.stdout
    assert not (tmp_path / "q.json").exists()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (f"{SCAN}:missing", "has no name 'missing'"),
        (f"{SCAN}:not_a_dataset", "is a int, not a dataset"),
        ("/no/such/folder", "no such folder: /no/such/folder"),
    ],
)
def test_cli_bad_spec_is_one_line_and_exit_2(spec: str, message: str) -> None:
    result = run_python(["-m", "loaderdoctor", "scan", spec], timeout=60)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("loaderdoctor scan: error: ")
    assert message in lines[0]
    assert result.stdout == ""


@pytest.mark.slow
def test_slowest_samples_are_their_own_fetch_and_worker_start_up_is_apart() -> None:
    report = scan_dataset(datasets.SlowStart(), num_workers=2, timeout=30)
    assert report.bad == [] and report.scanned == 24
    assert report.slowest[0].index == datasets.SLOW_AT  # not the first sample of each worker
    assert report.slowest[0].seconds >= 0.15
    assert len(report.worker_startup) == 2  # one per worker started, apart from the samples
    assert all(seconds >= 0.3 for seconds in report.worker_startup)
    text = io.StringIO()
    print_text(report, text)
    pattern = (
        "worker start-up (a first fetch beyond the sample's own time, not in the slowest "
        "samples): median * ms, max * ms over 2 workers"
    )
    assert len(fnmatch.filter(text.getvalue().splitlines(), pattern)) == 1
