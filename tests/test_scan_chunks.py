"""scan sends samples in chunks; each fault still names exactly its sample."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

import pytest

from conftest import FIXTURES
from loaderdoctor.scan import scan_dataset
from loaderdoctor.scan.core import MAX_CHUNK, chunk_size


def _import_fixture() -> ModuleType:
    path = FIXTURES / "scan" / "scan_datasets.py"
    spec = importlib.util.spec_from_file_location("scan_datasets", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["scan_datasets"] = module  # picklable classes, as the spec loader does
    spec.loader.exec_module(module)
    return module


datasets = _import_fixture()


@pytest.mark.parametrize(
    ("samples", "workers", "chunk"),
    [(20, 2, 1), (320, 2, 20), (1500, 2, MAX_CHUNK), (1500, 1, MAX_CHUNK), (100, 8, 1), (0, 2, 1)],
)
def test_chunks_leave_every_worker_eight_batches_at_least(
    samples: int, workers: int, chunk: int
) -> None:
    assert chunk_size(samples, workers) == chunk


@pytest.mark.slow
def test_every_fault_in_one_chunk_is_named_exactly() -> None:
    # 320 samples on 2 workers: chunks of 20, so the exception (3), the native crash (7), the
    # hang (11) and the odd structure (14) all travel in the first chunk, with 16 healthy samples.
    assert chunk_size(320, 2) == 20
    report = scan_dataset(datasets.Planted(length=320), num_workers=2, timeout=1.5)
    causes = {bad.index: bad.cause for bad in report.bad}
    assert causes == {
        datasets.EXCEPTION_AT: "sample-error",
        datasets.CRASH_AT: "native-crash",
        datasets.HANG_AT: "worker-hang",
    }
    assert [o.index for o in report.outliers] == [datasets.ODD_AT]
    assert report.scanned == 320 - 3
    assert report.bad[0].message == f"ValueError: corrupt record {datasets.EXCEPTION_AT}"


@pytest.mark.slow
def test_oom_kills_in_one_chunk_name_exactly_their_samples() -> None:
    # 256 samples on 2 workers: chunks of 16, both 1 GiB samples (4, 13) in the first one
    assert chunk_size(256, 2) == 16
    report = scan_dataset(
        datasets.Hungry(length=256), num_workers=2, timeout=30, mem_limit=256 << 20
    )
    assert sorted(bad.index for bad in report.bad) == list(datasets.OOM_AT)
    if report.mem_cap and report.mem_cap.startswith("memory cgroup"):  # root with a memory cgroup
        assert {bad.cause for bad in report.bad} == {"oom-killed"}
    else:  # the RLIMIT_AS fallback: the allocation raises MemoryError in the worker
        assert all("MemoryError" in bad.message for bad in report.bad)
    assert report.hungriest[0].index == datasets.HUNGRY_AT
    assert report.scanned == 256 - len(datasets.OOM_AT)
