"""A WebDataset pipeline over tar shards the test writes: a worker killed at one sample
resumes its shard; the culprit is named by its ``__key__`` and every other sample arrives once."""

from __future__ import annotations

import ctypes
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
from loaderdoctor.supervise.worker.stream_names import NameTrail

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
    # named as it passed the pipeline's stages, at the death, with its shard
    in_flight = [line for line in diagnosis.evidence if line.startswith("in flight: ")]
    assert in_flight == [
        f"in flight: item #7 of worker 2's stream (key {CULPRIT!r}) ({urls[2]}), fetch stage, "
        f"batch {diagnosis.batch}"
    ]
    assert diagnosis.sample_file == urls[2]
    incident = loader.report.to_dict()["incidents"][0]
    assert (incident["worker_id"], incident["position"], incident["key"]) == (2, 7, CULPRIT)
    heal = [w for w in caught if issubclass(w.category, HealWarning)]
    assert [w.filename for w in heal] == [__file__]


class KillOnceUnchanged(KillOnce):
    """As KillOnce, the sample passed on whole (its ``__key__`` with it)."""

    def __call__(self, sample: dict[str, Any]) -> dict[str, Any]:
        super().__call__(sample)
        return sample


class SegfaultAt:
    """A decode step that crashes in native code at one sample, every time it is read."""

    def __call__(self, sample: dict[str, Any]) -> dict[str, Any]:
        if sample["__key__"] == CULPRIT:
            ctypes.string_at(0)  # a real SIGSEGV
        return sample


def received_and_incidents(pipeline: Any) -> tuple[list[bytes], list[tuple]]:
    loader = loaderdoctor.DataLoader(
        pipeline, batch_size=3, num_workers=SHARDS, heal=True, hang_timeout=5.0
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", HealWarning)
        texts = [text for _, texts in loader for text in texts]
    incidents = [
        (i.action, i.diagnosis.worker_id, i.diagnosis.position, i.diagnosis.key)
        for i in loader.incidents
    ]
    return texts, incidents


@pytest.mark.slow
def test_tuple_items_are_named_by_their_key(tmp_path: Path) -> None:
    """``.to_tuple(...)`` drops ``__key__``: the culprit, re-tried and delivered as a tuple of
    bytes, is still named by it."""
    urls = write_shards(tmp_path)
    pipeline = (
        wds.WebDataset(urls, shardshuffle=False, empty_check=False)
        .map(KillOnceUnchanged(str(tmp_path / "fired")))
        .to_tuple("cls", "txt")
    )
    texts, incidents = received_and_incidents(pipeline)
    every = [f"s{shard}-{i:04d}".encode() for shard in range(SHARDS) for i in range(PER_SHARD)]
    assert Counter(texts) == Counter(every)
    assert incidents == [("respawned", 2, 7, CULPRIT)]


@pytest.mark.slow
def test_an_item_that_crashes_its_worker_every_time_is_named_by_key_and_shard(
    tmp_path: Path,
) -> None:
    urls = write_shards(tmp_path)
    pipeline = (
        wds.WebDataset(urls, shardshuffle=False, empty_check=False)
        .map(SegfaultAt())
        .to_tuple("cls", "txt")
    )
    loader_texts, incidents = received_and_incidents(pipeline)
    # worker 2's stream cannot be read past its item #7: the rest of its shard is lost
    kept = [
        f"s{shard}-{i:04d}".encode()
        for shard in range(SHARDS)
        for i in range(PER_SHARD)
        if shard != 2 or i < 7
    ]
    assert Counter(loader_texts) == Counter(kept)
    assert incidents == [("respawned", 2, 7, CULPRIT), ("lost", 2, 7, CULPRIT)]


def names_by_position(pipeline: Any) -> list[str | None]:
    """The key the name trail gives each item of ``pipeline``, read in this process."""
    trail = NameTrail(slot=None)
    return [trail.key_at(position) for position, _ in enumerate(trail.open(pipeline, 0))]


def test_a_stage_that_drops_items_leaves_the_items_after_it_unnamed_never_misnamed(
    tmp_path: Path,
) -> None:
    urls = write_shards(tmp_path)[:1]
    plain = wds.WebDataset(urls, shardshuffle=False, empty_check=False)
    stages = list(plain.pipeline)
    every = [f"s0-{i:04d}" for i in range(PER_SHARD)]
    assert names_by_position(plain.to_tuple("cls", "txt")) == every
    # a filter after the last keyed stage: its counts and the stream's disagree from the drop on
    dropped = plain.to_tuple("cls", "txt").select(lambda item: item[0] != b"2")
    assert names_by_position(dropped) == [*every[:2], *[None] * (PER_SHARD - 3)]
    # a filter before it: every item it passes is named by the stage after it
    selected = plain.select(lambda sample: sample["cls"] != b"2").to_tuple("cls", "txt")
    assert names_by_position(selected) == [*every[:2], *every[3:]]
    assert plain.pipeline == stages  # the user's pipeline is left as it was


class KillAtItem:
    """SIGKILLs its worker at the worker's ``at``-th item (counted from 0), once: by then the
    user has received the worker's first batch (a worker is sent batch 3's task only once its
    batch 1 arrived)."""

    def __init__(self, flag: str, at: int) -> None:
        self.flag, self.at, self.seen = flag, at, 0

    def __call__(self, sample: dict[str, Any]) -> dict[str, Any]:
        self.seen += 1
        if self.seen > self.at and not os.path.exists(self.flag):
            Path(self.flag).touch()
            os.kill(os.getpid(), signal.SIGKILL)
        return sample


@pytest.mark.slow
@pytest.mark.parametrize("loader_class", ["DataLoader", "StatefulDataLoader"])
def test_a_shuffled_stream_that_replays_otherwise_is_healed_with_loss(
    tmp_path: Path, loader_class: str
) -> None:
    """WebDataset's ``.shuffle(n)`` seeds its buffer from the pid and the clock: the replacement
    re-reads its stream in another order, so items may arrive twice or not at all. That is
    said, and the loader's status (and the death's action) say the loss, never plain healed;
    under ``StatefulDataLoader`` too, where torchdata re-reads the stream and drops what was
    delivered."""
    if loader_class == "StatefulDataLoader":
        pytest.importorskip("torchdata", reason="the eco extra installs torchdata")
    urls = write_shards(tmp_path)
    pipeline = (
        wds.WebDataset(urls, shardshuffle=False, empty_check=False)
        .shuffle(8)
        .map(KillAtItem(str(tmp_path / "fired"), at=9))
    )
    loader = getattr(loaderdoctor, loader_class)(pipeline, batch_size=3, num_workers=1, heal=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", HealWarning)
        keys = [key for batch in loader for key in batch["__key__"]]
    assert (tmp_path / "fired").exists() and len(keys) > PER_SHARD
    said = [str(w.message) for w in caught if "is not replayable" in str(w.message)]
    assert len(said) == 1, [str(w.message) for w in caught]
    assert [i.action for i in loader.incidents] == ["lost"]
    assert loader.incidents[0].diagnosis.evidence[-1] == said[0].removeprefix("loaderdoctor: ")
    assert loader.report.status == "healed-with-loss"
