"""Silent data bugs: wrong data without an error, found while the loader runs (and silent on the
correct forms: a sharded stream, set_epoch called, a value shared with the workers)."""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import multiprocessing
import random
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import BatchSampler, IterableDataset, RandomSampler
from torch.utils.data.distributed import DistributedSampler

import loaderdoctor
from conftest import FIXTURES, run_python
from loaderdoctor.report.run_text import format_data_finding
from loaderdoctor.runner import protocol
from loaderdoctor.supervise import detectors
from loaderdoctor.supervise.detectors import (
    DataError,
    DataWarning,
    DataWatch,
    batch_fingerprint,
    simple_attributes,
)
from loaderdoctor.supervise.worker import rng_states

SCRIPT = FIXTURES / "run" / "silent_data.py"


class Records(IterableDataset):  # type: ignore[type-arg]
    def __iter__(self) -> Iterator[int]:
        return iter(range(8))


class Table(torch.utils.data.Dataset):  # type: ignore[type-arg]
    def __init__(self) -> None:
        self.difficulty = 1
        self.cache: Any = None  # filled lazily by the main process: never a finding
        self.shared = multiprocessing.Value("i", 1)

    def __len__(self) -> int:
        return 64

    def __getitem__(self, index: int) -> int:
        return index


def _watch(loader: Any, strict: bool = False) -> DataWatch:
    return DataWatch(loader.dataset, lambda: loader, strict=strict)


def _quiet(watch: DataWatch, steps: Any) -> list[str]:
    """Run ``steps(watch)`` and end its epoch; the DataWarnings given, as text."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        steps(watch)
        watch.epoch_finished()
    return [str(w.message) for w in caught if issubclass(w.category, DataWarning)]


# --- duplicated streams ------------------------------------------------------------------------
def _stream_epoch(watch: DataWatch, batches: list[Any]) -> None:
    watch.epoch_started(0)
    for batch in batches:
        watch.delivered(None, batch)


@pytest.mark.filterwarnings("ignore:This DataLoader will create 4 worker processes")  # 2 cores
def test_a_stream_every_worker_yields_whole_is_found_with_the_workers() -> None:
    loader = torch.utils.data.DataLoader(Records(), batch_size=2, num_workers=4)
    watch = _watch(loader)
    whole = [torch.tensor([2 * i, 2 * i + 1]) for i in range(4)]
    four_times = [whole[i // 4] for i in range(16)]  # torch takes the 4 workers in turn
    said = _quiet(watch, lambda w: _stream_epoch(w, four_times))
    assert said == [
        "loaderdoctor: every worker yields the same stream: items arrive up to 4 times "
        "[duplicated-stream]\n"
        "  of the first 16 batches of epoch 0, 4 are distinct: each arrived up to 4 times\n"
        "  batch 0 arrived again as batch(es) 1, 2, 3 (from workers 0, 1, 2, 3, taken in turn)\n"
        "  batch 4 arrived again as batch(es) 5, 6, 7 (from workers 0, 1, 2, 3, taken in turn)\n"
        "  Records.__iter__ yields the same items in each of the 4 workers: it does not split "
        "its stream by get_worker_info()\n"
        "  fix: in __iter__, take this worker's share: info = torch.utils.data.get_worker_info(); "
        "itertools.islice(stream, info.id, None, info.num_workers) (or give each worker its own "
        "files)"
    ]
    assert [f.kind for f in watch.findings] == ["duplicated-stream"]


@pytest.mark.filterwarnings("ignore:This DataLoader will create 4 worker processes")
def test_a_finding_is_said_at_the_epoch_boundary_never_between_two_batches() -> None:
    # torch's loader says nothing while a clean epoch runs: a warning between two batches breaks
    # a test that asserts none (torch's own suite does, on a stream every worker yields whole)
    loader = torch.utils.data.DataLoader(Records(), batch_size=2, num_workers=4)
    whole = [torch.tensor([2 * i, 2 * i + 1]) for i in range(4)]
    batches = [whole[i // 4] for i in range(16)]  # torch takes the 4 workers in turn
    for end in ("epoch_finished", "next_epoch"):
        watch = _watch(loader)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            _stream_epoch(watch, batches)
            assert caught == [] and [f.kind for f in watch.findings] == ["duplicated-stream"]
            if end == "epoch_finished":
                watch.epoch_finished()
            else:
                watch.epoch_started(1)
            assert [w.category for w in caught] == [DataWarning]
            watch.epoch_finished()
            assert len(caught) == 1  # said once
    strict = _watch(loader, strict=True)
    with pytest.raises(DataError, match=r"\[duplicated-stream\]"):
        _stream_epoch(strict, batches)  # strict raises at once, between two batches


class Counting(IterableDataset):  # type: ignore[type-arg]
    def __iter__(self) -> Iterator[int]:
        return iter(range(20))


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:This DataLoader will create 3 worker processes")  # 2 cores
def test_a_real_loader_iterates_a_duplicated_stream_without_a_warning_until_its_next_epoch() -> (
    None
):
    loader = loaderdoctor.DataLoader(Counting(), num_workers=3)
    iterator = iter(loader)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(40):
            next(iterator)
    assert caught == []
    assert [f["kind"] for f in loader.report.data_findings] == ["duplicated-stream"]
    with pytest.warns(DataWarning, match=r"\[duplicated-stream\]"):
        iterator = iter(loader)
    del iterator


@pytest.mark.filterwarnings("ignore:This DataLoader will create 4 worker processes")
def test_a_sharded_or_constant_stream_is_not_a_duplicate() -> None:
    loader = torch.utils.data.DataLoader(Records(), batch_size=2, num_workers=4)
    sharded = [torch.tensor([2 * i, 2 * i + 1]) for i in range(16)]
    constant = [torch.zeros(2, 3)] * 16  # synthetic data: one batch, again and again
    for batches in (sharded, constant):
        watch = _watch(loader)
        assert _quiet(watch, lambda w, b=batches: _stream_epoch(w, b)) == []


def test_batch_fingerprints_read_nested_batches_of_any_dtype() -> None:
    batch = {"image": torch.ones(2, 3, dtype=torch.bfloat16), "key": ["a", "b"], "n": 2}
    same = {"image": torch.ones(2, 3, dtype=torch.bfloat16), "key": ["a", "b"], "n": 2}
    other = {"image": torch.ones(2, 3, dtype=torch.bfloat16), "key": ["a", "c"], "n": 2}
    assert batch_fingerprint(batch) == batch_fingerprint(same) != batch_fingerprint(other)
    assert batch_fingerprint(np.arange(1000)) != batch_fingerprint(np.arange(1, 1001))
    assert batch_fingerprint(object()) is None


# --- frozen shuffles ---------------------------------------------------------------------------
def _epochs(watch: DataWatch, loader: Any, epochs: int, before: Any) -> None:
    for epoch in range(epochs):
        before(epoch)
        watch.epoch_started(epoch)
        for indices in loader.batch_sampler:
            watch.delivered(indices, None)


def test_a_distributed_sampler_without_set_epoch_is_found() -> None:
    dataset = Table()
    sampler = DistributedSampler(dataset, num_replicas=2, rank=0, shuffle=True, seed=0)
    loader = torch.utils.data.DataLoader(dataset, batch_size=4, sampler=sampler)
    watch = _watch(loader)
    said = _quiet(watch, lambda w: _epochs(w, loader, 3, lambda epoch: None))
    assert said == [
        "loaderdoctor: the DistributedSampler repeats the same order every epoch [frozen-order]\n"
        "  epoch 1 began with the same 8 batches (32 samples) as epoch 0, in the same order: "
        "indices [44, 17, 47, 35, 33, 63, 28, 42]...\n"
        "  the DistributedSampler's epoch is still 0: set_epoch() was not called, so every "
        "epoch (on every rank) repeats the first one's order\n"
        "  fix: call loader.sampler.set_epoch(epoch) at the start of each epoch, before "
        "iterating the loader"
    ]
    watch = _watch(loader)
    assert _quiet(watch, lambda w: _epochs(w, loader, 3, sampler.set_epoch)) == []


def test_a_seed_reset_in_the_epoch_loop_freezes_a_random_sampler() -> None:
    loader = torch.utils.data.DataLoader(Table(), batch_size=4, shuffle=True)
    watch = _watch(loader)
    said = _quiet(watch, lambda w: _epochs(w, loader, 2, lambda epoch: torch.manual_seed(0)))
    assert [line.split("\n")[0] for line in said] == [
        "loaderdoctor: the RandomSampler repeats the same order every epoch [frozen-order]"
    ]
    watch = _watch(loader)
    assert _quiet(watch, lambda w: _epochs(w, loader, 3, lambda epoch: None)) == []
    in_order = torch.utils.data.DataLoader(Table(), batch_size=4)  # shuffle=False: same order
    watch = _watch(in_order)
    assert _quiet(watch, lambda w: _epochs(w, in_order, 2, lambda epoch: None)) == []


def test_a_custom_batch_sampler_is_read_through() -> None:
    dataset = Table()
    batches = BatchSampler(RandomSampler(dataset), batch_size=4, drop_last=False)
    loader = torch.utils.data.DataLoader(dataset, batch_sampler=batches)
    assert isinstance(detectors.shuffling_sampler(loader), RandomSampler)


# --- stale persistent workers --------------------------------------------------------------
def _stale_epochs(watch: DataWatch, change: Any, new_pool: bool = False) -> None:
    watch.epoch_started(0)
    watch.workers_started()
    watch.delivered([0], None)
    change()
    watch.epoch_started(1)
    if new_pool:
        watch.workers_started()
    watch.delivered([1], None)


def test_an_attribute_changed_under_persistent_workers_is_found() -> None:
    dataset = Table()
    loader = torch.utils.data.DataLoader(dataset, num_workers=2, persistent_workers=True)

    def change() -> None:
        dataset.difficulty = 3
        dataset.cache = {"filled": True}
        dataset.shared.value = 3  # shared memory: the workers see it

    said = _quiet(_watch(loader), lambda w: _stale_epochs(w, change))
    assert said == [
        "loaderdoctor: the persistent workers load with stale Table attributes [stale-workers]\n"
        "  self.difficulty: 1 when the workers started, 3 now in the main process\n"
        "  persistent_workers=True: the workers keep the copy of the dataset they started with; "
        "a change in the main process never reaches them\n"
        "  fix: pass the value through shared memory (a multiprocessing.Value or a shared tensor "
        "read in __getitem__), or set persistent_workers=False so that each epoch's workers copy "
        "the dataset anew"
    ]


def test_new_workers_or_a_shared_value_are_never_stale() -> None:
    dataset = Table()
    persistent = torch.utils.data.DataLoader(dataset, num_workers=2, persistent_workers=True)
    fresh = torch.utils.data.DataLoader(dataset, num_workers=2)

    def raise_difficulty() -> None:
        dataset.difficulty += 1

    def share() -> None:
        dataset.shared.value += 1

    assert _quiet(_watch(fresh), lambda w: _stale_epochs(w, raise_difficulty)) == []
    assert _quiet(_watch(persistent), lambda w: _stale_epochs(w, share)) == []
    # healing started the pool anew: its workers copied the dataset as it is now
    restarted = _watch(persistent)
    assert _quiet(restarted, lambda w: _stale_epochs(w, raise_difficulty, new_pool=True)) == []


def test_a_worker_replaced_alone_leaves_its_siblings_stale() -> None:
    """One dead worker replaced alone copies the dataset anew; the pool's other workers still
    hold the copy they started with, so a change made before the replacement is still said."""
    from loaderdoctor.supervise.parent.supervision import Settings, Supervision

    dataset = Table()
    loader = torch.utils.data.DataLoader(dataset, num_workers=2, persistent_workers=True)
    settings = Settings.from_keywords(None, True, "raise", None, None, False)

    def epochs(rebuilt: bool) -> list[str]:
        dataset.difficulty = 1
        supervision = Supervision(settings, dataset, lambda: loader)

        def steps(_: DataWatch) -> None:
            supervision.epoch_started()
            supervision.workers_started({101, 102})
            supervision.delivered([0], torch.zeros(1))
            dataset.difficulty = 3
            supervision.epoch_started()
            if rebuilt:
                supervision.workers_started({103, 104})
            else:
                supervision.worker_replaced(103)
            supervision.delivered([1], torch.zeros(1))

        return _quiet(supervision.data, steps)

    replaced = epochs(rebuilt=False)
    assert [said.split("\n")[1] for said in replaced] == [
        "  self.difficulty: 1 when the workers started, 3 now in the main process"
    ]
    assert epochs(rebuilt=True) == []  # a new pool: every worker copied the dataset anew


def test_simple_attributes_reach_a_transform_in_a_list() -> None:
    class Resize:
        def __init__(self) -> None:
            self.size = (224, 224)

    class Compose:
        def __init__(self) -> None:
            self.transforms = [Resize(), len]

    dataset = Table()
    dataset.transform = Compose()  # type: ignore[attr-defined]
    assert simple_attributes(dataset) == {
        "self.difficulty": "1",
        "self.transform.transforms[0].size": "(224, 224)",
    }


# --- cloned randomness ---------------------------------------------------------------------
def test_generators_are_fingerprinted_without_drawing() -> None:
    class Augment:
        def __init__(self) -> None:
            self.np_rng = np.random.default_rng(0)
            self.legacy = np.random.RandomState(0)
            self.py_rng = random.Random(0)
            self.torch_rng = torch.Generator().manual_seed(0)

    augment = Augment()
    found = rng_states.dataset_generators(augment)
    assert {path: kind for path, (kind, _) in found.items()} == {
        "self.np_rng": "numpy Generator",
        "self.legacy": "numpy RandomState",
        "self.py_rng": "random.Random",
        "self.torch_rng": "torch.Generator",
    }
    assert rng_states.dataset_generators(augment) == found  # reading drew nothing
    augment.np_rng.random()
    assert rng_states.dataset_generators(augment)["self.np_rng"] != found["self.np_rng"]


def test_a_callable_transform_object_is_searched_and_code_is_not() -> None:
    class Flip:  # an augmentation pipeline is an object with __call__
        def __init__(self) -> None:
            self.rng = np.random.default_rng(0)

        def __call__(self, image: Any) -> Any:
            return image

    class Crops:
        def __init__(self) -> None:
            self.transform = Flip()
            self.module = random  # its _inst is the global generator: torch seeds that one
            self.function = random.random

    assert list(rng_states.dataset_generators(Crops())) == ["self.transform.rng"]


def _event(worker: int, states: dict[str, list[str]]) -> dict[str, Any]:
    return {"kind": rng_states.EVENT_KIND, "worker": worker, "dataset": "Crops", "states": states}


def test_workers_starting_from_one_generator_state_are_found() -> None:
    loader = torch.utils.data.DataLoader(Table(), num_workers=2)
    watch = _watch(loader)

    def start(w: DataWatch) -> None:
        w.epoch_started(0)
        w.workers_started()
        w.worker_random_states(_event(0, {"torch": ["t", "a"], "self.rng": ["numpy", "x"]}))
        w.worker_random_states(_event(1, {"torch": ["t", "b"], "self.rng": ["numpy", "x"]}))

    assert _quiet(watch, start) == [
        "loaderdoctor: workers 0, 1 start with the same random state (Crops's rng) "
        "[cloned-randomness]\n"
        "  self.rng (numpy) has the same state in workers 0, 1 at their start: they draw the same "
        '"random" augmentations\n'
        "  fix: create or seed self.rng in each worker: in worker_init_fn (e.g. from "
        "torch.utils.data.get_worker_info().seed), or lazily at the first __getitem__"
    ]
    two = _watch(loader)  # one finding for an object's generators, each named

    def start_two(w: DataWatch) -> None:
        w.epoch_started(0)
        w.workers_started()
        states = {"self.t.rng": ["numpy", "x"], "self.t.py": ["random", "y"]}
        w.worker_random_states(_event(0, states))
        w.worker_random_states(_event(1, states))

    (said,) = _quiet(two, start_two)
    assert said.splitlines()[0] == (
        "loaderdoctor: workers 0, 1 start with the same random state (Crops's t.rng, t.py) "
        "[cloned-randomness]"
    )
    assert said.splitlines()[-1] == (
        "  fix: create or seed self.t.rng, self.t.py in each worker: in worker_init_fn (e.g. "
        "from torch.utils.data.get_worker_info().seed), or lazily at the first __getitem__"
    )
    watch = _watch(loader)  # each pool compares its own workers: a replacement is no clone
    watch.worker_random_states(_event(1, {"self.rng": ["numpy", "x"]}))
    watch.workers_started()
    assert (
        _quiet(watch, lambda w: w.worker_random_states(_event(1, {"self.rng": ["n", "x"]}))) == []
    )


# --- strict, the report ----------------------------------------------------------------------
def test_strict_raises_a_data_error_that_is_a_loader_error() -> None:
    loader = torch.utils.data.DataLoader(Table(), batch_size=4, shuffle=True)
    watch = _watch(loader, strict=True)
    with pytest.raises(DataError, match=r"\[frozen-order\]") as raised:
        _epochs(watch, loader, 2, lambda epoch: torch.manual_seed(0))
    assert isinstance(raised.value, loaderdoctor.LoaderError)
    assert protocol.STRICT_DATA_ENV == detectors.STRICT_ENV


def test_a_finding_is_one_line_of_the_run_summary() -> None:
    finding = {"kind": "stale-workers", "title": "t", "evidence": ["e1", "e2"], "fix": "f"}
    assert format_data_finding(finding) == "wrong data [stale-workers]: t; e1; fix: f"


# --- real workers ------------------------------------------------------------------------------
def _script() -> Any:
    return importlib.import_module("silent_data")


def _findings(case: str, method: str) -> tuple[list[str], list[dict[str, Any]]]:
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _script().main(case, method)
    lines = printed.getvalue().splitlines()
    return lines[:-1], json.loads(lines[-1])


@pytest.mark.slow
def test_real_scripts_under_fork_found_and_their_correct_forms_silent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.syspath_prepend(str(SCRIPT.parent))
    cases = {
        "sharded": (["48 48"], []),  # and re-seeded in worker_init_fn
        "no-set-epoch": (["[44, 17, 47, 35]", "[44, 17, 47, 35]"], ["frozen-order"]),
        "set-epoch": (["[44, 17, 47, 35]", "[37, 10, 47, 31]"], []),
        "stale": (["[1]", "[1]"], ["stale-workers"]),
        "shared-value": (["[1]", "[2]"], []),
    }
    for case, (epochs, kinds) in cases.items():
        printed, findings = _findings(case, "fork")
        assert (printed, [f["kind"] for f in findings]) == (epochs, kinds), case


@pytest.mark.slow
def test_a_real_stream_under_spawn_duplicated_and_cloned(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(SCRIPT.parent))
    printed, findings = _findings("stream", "spawn")
    assert printed == ["96 48"]  # every record twice
    assert sorted(f["kind"] for f in findings) == ["cloned-randomness", "duplicated-stream"]
    cloned = next(f for f in findings if f["kind"] == "cloned-randomness")
    assert cloned["evidence"] == [
        "self.rng (numpy Generator) has the same state in workers 0, 1 at their start: they "
        'draw the same "random" augmentations'
    ]


@pytest.mark.slow
def test_run_strict_fails_the_command_and_reports_the_finding(tmp_path: Path) -> None:
    result = run_python(
        [
            "-m",
            "loaderdoctor",
            "run",
            "--strict",
            "--report-dir",
            str(tmp_path),
            "--",
            sys.executable,
            str(SCRIPT),
            "no-set-epoch",
        ],
        timeout=120,
    )
    assert result.returncode == 1, result.stderr[-2000:]
    assert (
        "loaderdoctor.supervise.detectors.DataError: loaderdoctor: the "
        "DistributedSampler repeats the same order every epoch [frozen-order]" in result.stderr
    )
    report = json.loads((tmp_path / "report.json").read_text())
    assert [(f["kind"], f["epoch"]) for f in report["data_findings"]] == [("frozen-order", 1)]
