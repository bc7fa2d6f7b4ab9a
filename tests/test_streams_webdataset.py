"""A WebDataset pipeline over tar shards the test writes (issue 14): a worker killed at one sample
resumes its shard; the culprit is named by its ``__key__`` and every other sample arrives once."""

from __future__ import annotations

import io
import os
import signal
import tarfile
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import loaderdoctor
from loaderdoctor.supervise.heal import HealWarning

wds = pytest.importorskip("webdataset", reason="the dev extra installs webdataset")

SHARDS = 4
PER_SHARD = 12
CULPRIT = "s2-0007"  # shard 2 goes to worker 2; its item #7


def write_shards(directory: Path) -> list[str]:
    urls = []
    for shard in range(SHARDS):
        path = directory / f"shard-{shard}.tar"
        with tarfile.open(path, "w") as tar:
            for i in range(PER_SHARD):
                key = f"s{shard}-{i:04d}"
                for ext, payload in (("txt", key.encode()), ("cls", str(i).encode())):
                    info = tarfile.TarInfo(f"{key}.{ext}")
                    info.size = len(payload)
                    tar.addfile(info, io.BytesIO(payload))
        urls.append(str(path))
    return urls


class KillOnce:
    """A decode step that is SIGKILLed at one sample, once (as an external kill is)."""

    def __init__(self, flag: str) -> None:
        self.flag = flag

    def __call__(self, sample: dict[str, Any]) -> dict[str, Any]:
        if sample["__key__"] == CULPRIT and not os.path.exists(self.flag):
            Path(self.flag).touch()
            os.kill(os.getpid(), signal.SIGKILL)
        return {"__key__": sample["__key__"], "text": sample["txt"].decode()}


@pytest.mark.slow
def test_a_killed_webdataset_worker_resumes_its_shard_and_names_the_culprit_key(
    tmp_path: Path,
) -> None:
    urls = write_shards(tmp_path)
    pipeline = wds.WebDataset(urls, shardshuffle=False, empty_check=False).map(
        KillOnce(str(tmp_path / "fired"))
    )
    loader = loaderdoctor.DataLoader(
        pipeline, batch_size=3, num_workers=SHARDS, heal=True, hang_timeout=5.0
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", HealWarning)
        keys = [key for batch in loader for key in batch["__key__"]]
    every = [f"s{shard}-{i:04d}" for shard in range(SHARDS) for i in range(PER_SHARD)]
    assert Counter(keys) == Counter(every)  # the culprit too: re-tried once, it loaded
    assert [(i.diagnosis.cause, i.action) for i in loader.incidents] == [
        ("killed-by-signal", "respawned")
    ]
    diagnosis = loader.incidents[0].diagnosis
    assert (diagnosis.worker_id, diagnosis.position, diagnosis.key) == (2, 7, CULPRIT)
    assert (
        f"item #7 of worker 2's stream has key {CULPRIT!r} (read again when the stream resumed)"
    ) in diagnosis.evidence
    incident = loader.report.to_dict()["incidents"][0]
    assert (incident["worker_id"], incident["position"], incident["key"]) == (2, 7, CULPRIT)
    heal = [w for w in caught if issubclass(w.category, HealWarning)]
    assert [w.filename for w in heal] == [__file__]
