"""Streaming libraries, unchanged, under ``loaderdoctor run --heal`` and the drop-in class: the
same batches as stock, and the truth about what was supervised.

litdata runs in CI, installed by ``.ci/run`` without the torchvision it declares and never imports
(``.ci/litdata.txt``). MosaicML ``streaming`` cannot: mosaicml-streaming 0.13.0 requires
``transformers<5`` (the ``eco`` extra has 5.x) and imports torchvision at import (no wheel for CI's
CPU torch 2.13.0); ``scripts/streaming_matrix.sh`` runs it in a venv of its own. Each test skips
with the reason where its library cannot be imported.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import run_python

pytestmark = [pytest.mark.slow, pytest.mark.ecosystem]
SCRIPT = Path(__file__).parent / "stacks" / "streaming_libraries.py"


def need(module: str, package: str) -> None:
    try:
        importlib.import_module(module)
    # streaming imports torchvision at import, which raises RuntimeError where its build does not
    # match torch's (0.28.0, a CUDA build, beside CI's CPU torch 2.13.0)
    except (ImportError, RuntimeError) as error:
        pytest.skip(f"needs {package} ({type(error).__name__}: {error})")


def job(
    tmp_path: Path, library: str, name: str, *, run: list[str] | None, env: dict[str, str]
) -> tuple[Any, dict[str, list[int]], dict[str, Any] | None]:
    folder = tmp_path / "data"
    folder.mkdir(exist_ok=True)
    prefix = str(tmp_path / name)
    command = [str(SCRIPT), library, str(folder), prefix]
    report_dir = tmp_path / f"report-{name}"
    if run is not None:
        command = ["-m", "loaderdoctor", "run", *run, "--report-dir", str(report_dir), "--"]
        command += [sys.executable, str(SCRIPT), library, str(folder), prefix]
    result = run_python(command, timeout=120, env={"OMP_NUM_THREADS": "1", **env})
    ledgers = {
        path.name[len(name) + 1 : -len(".json")]: json.loads(path.read_text())
        for path in tmp_path.glob(f"{name}-*.json")
    }
    report = report_dir / "report.json"
    return result, ledgers, json.loads(report.read_text()) if report.exists() else None


def test_litdata_runs_as_stock_and_its_own_loader_is_said_unsupervised(tmp_path: Path) -> None:
    need("litdata", "litdata")
    result, _, _ = job(tmp_path, "litdata-data", "data", run=None, env={})
    assert result.returncode == 0, result.stderr[-4000:]
    _, stock, _ = job(tmp_path, "litdata", "stock", run=None, env={})
    result, healed, report = job(
        tmp_path, "litdata", "healed", run=["--heal"], env={"LD_DROP_IN": "1"}
    )
    details = result.stderr[-4000:]
    assert result.returncode == 0, details
    assert sorted(stock["torch"]) == list(range(200)), details
    assert healed == {**stock, "dropin": stock["torch"]}, details
    assert report is not None
    # the torch loader's and the drop-in's, not litdata's own loader's
    assert (report["status"], report["delivered"]["samples"]) == ("ok", 400)
    [unsupervised] = report["unsupervised_loaders"]
    assert unsupervised["loader"] == "StreamingDataLoader", details
    assert unsupervised["site"].endswith("streaming_libraries.py:89)"), details
    assert report["notes"] == [
        f"StreamingDataLoader at {unsupervised['site']} ran unsupervised: "
        "litdata.streaming.dataloader.StreamingDataLoader overrides DataLoader._get_iterator "
        "and builds its own iterator: its workers run without loaderdoctor's hooks (a worker "
        "death there is torch's own error) and its batches are not counted; this DataLoader "
        "runs as plain torch, unsupervised."
    ]
    # a worker of the torch loader killed: its replacement replays its stream, exactly once
    result, killed, report = job(
        tmp_path, "litdata", "killed", run=["--heal"], env={"LD_KILL_AT": "50"}
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert killed == stock
    assert report is not None and report["status"] == "healed"
    assert [(i["cause"], i["action"]) for i in report["incidents"]] == [
        ("killed-by-signal", "respawned")
    ]


def test_mosaic_streaming_runs_as_stock_and_a_death_is_declined_at_once(tmp_path: Path) -> None:
    need("streaming", "mosaicml-streaming")
    _, stock, _ = job(tmp_path, "mosaic", "stock", run=None, env={})
    result, healed, report = job(tmp_path, "mosaic", "healed", run=["--heal"], env={})
    assert result.returncode == 0, result.stderr[-4000:]
    assert sorted(stock["torch"]) == list(range(200))
    assert healed == stock
    assert report is not None and report["status"] == "ok"
    # a worker killed: healing declines at once (a replacement would wait at MosaicML's
    # barrier for ever), never a hang, and says why
    result, _, report = job(
        tmp_path,
        "mosaic",
        "killed",
        run=["--heal", "--hang-timeout", "30"],
        env={"LD_KILL_AT": "50"},
    )
    assert result.returncode == 1, result.stderr[-4000:]
    assert report is not None
    [incident] = report["incidents"]
    assert (incident["cause"], incident["action"]) == ("killed-by-signal", "raised")
    declined = [line for line in incident["evidence"] if line.startswith("not healed: ")]
    assert declined == [
        "not healed: MosaicML streaming's StreamingDataset coordinates all the loader's workers "
        "in shared memory (a barrier each worker waits at when its stream starts, and the "
        "epoch's partition among them): a replacement worker cannot resume one stream alone "
        "(it would wait at that barrier for ever); MosaicML resumes a job from its own "
        "state_dict"
    ]
