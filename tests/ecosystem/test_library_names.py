"""The names a streaming library has for the item a worker died on or raised at: litdata's chunk
file, MosaicML's shard file (and the item's id in the dataset), on the incident. With the real
libraries; each test skips with the reason where its library cannot be imported (they are not in
the eco extra: see test_streaming_libraries.py and scripts/streaming_matrix.sh)."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest

import loaderdoctor
from conftest import run_python

pytestmark = [pytest.mark.slow, pytest.mark.ecosystem]
STACKS = Path(__file__).parent / "stacks"
SCRIPT = STACKS / "streaming_libraries.py"


def need(module: str, package: str) -> None:
    try:
        __import__(module)
    # streaming imports torchvision at import, which raises RuntimeError where its build does not
    # match torch's (0.28.0, a CUDA build, beside CI's CPU torch 2.13.0)
    except (ImportError, RuntimeError) as error:
        pytest.skip(f"needs {package} ({type(error).__name__}: {error})")


def planted(base: type, fault: str) -> type:
    """``base`` with a fault at id 50: ``kill`` (SIGKILL its worker) or ``raise``."""

    class Planted(base):  # type: ignore[valid-type, misc]
        def __getitem__(self, index: Any) -> Any:
            sample = super().__getitem__(index)
            if int(sample["id"]) == 50:
                if fault == "kill":
                    os.kill(os.getpid(), signal.SIGKILL)
                raise ValueError("planted: sample 50 is bad")
            return sample

    return Planted


def first_failure(dataset: Any) -> Any:
    loader = loaderdoctor.DataLoader(dataset, batch_size=8, num_workers=2)
    with pytest.raises(Exception) as caught:
        list(loader)
    return caught.value.diagnosis  # type: ignore[attr-defined]


@pytest.mark.parametrize("fault", ["kill", "raise"])
def test_a_litdata_item_is_named_by_its_chunk_file(tmp_path: Path, fault: str) -> None:
    need("litdata", "litdata")
    import litdata

    made = run_python([str(SCRIPT), "litdata-data", str(tmp_path), str(tmp_path / "x")])
    assert made.returncode == 0, made.stderr[-4000:]
    chunks = tmp_path / "chunks"
    diagnosis = first_failure(planted(litdata.StreamingDataset, fault)(str(chunks)))
    cause = "killed-by-signal" if fault == "kill" else "sample-error"
    assert (diagnosis.cause, diagnosis.key) == (cause, "50")
    assert diagnosis.sample_file is not None
    assert Path(diagnosis.sample_file).parent == chunks
    assert Path(diagnosis.sample_file).name.startswith("chunk-")
    assert Path(diagnosis.sample_file).exists()


@pytest.mark.parametrize("fault", ["kill", "raise"])
def test_a_mosaic_sample_is_named_by_its_shard_file(tmp_path: Path, fault: str) -> None:
    need("streaming", "mosaicml-streaming")
    from streaming import MDSWriter, StreamingDataset
    from streaming.base.util import clean_stale_shared_memory

    data = tmp_path / "mds"
    with MDSWriter(out=str(data), columns={"id": "int"}, size_limit=2048) as out:
        for i in range(200):
            out.write({"id": i})
    clean_stale_shared_memory()
    dataset = planted(StreamingDataset, fault)(local=str(data), batch_size=8, shuffle=False)
    diagnosis = first_failure(dataset)
    cause = "killed-by-signal" if fault == "kill" else "sample-error"
    assert (diagnosis.cause, diagnosis.key) == (cause, "50")
    assert diagnosis.sample_file is not None
    assert Path(diagnosis.sample_file).parent == data
    assert Path(diagnosis.sample_file).name.startswith("shard.")
    assert Path(diagnosis.sample_file).exists()
