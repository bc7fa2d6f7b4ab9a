"""First, do no harm: where a protocol of the user's objects or of their library does not behave
as we call it, the job runs as stock torch runs it, and the report says what was turned off."""

from __future__ import annotations

import warnings
from dataclasses import replace
from typing import Any

import pytest
import torch
from torch.utils.data import IterableDataset

from loaderdoctor import DataLoader
from loaderdoctor.forensics import Diagnosis, Evidence, diagnose
from loaderdoctor.forensics.error_text import error_text
from loaderdoctor.supervise.loader import own_iterator_reason
from loaderdoctor.supervise.streams import is_stateful

# Hugging Face datasets' Image.decode_example, as a truncated JPEG's traceback quotes it
HF_TRACEBACK = """\
Traceback (most recent call last):
  File "/venv/site-packages/datasets/features/image.py", line 188, in decode_example
    image.load()  # to avoid "Too many open files" errors
    ^^^^^^^^^^^^
  File "/venv/site-packages/PIL/ImageFile.py", line 288, in load
    raise OSError(msg)
OSError: image file is truncated (3 bytes not processed)
"""


def test_cues_are_matched_against_the_error_not_the_source_lines_it_quotes() -> None:
    assert error_text(HF_TRACEBACK) == (
        "Traceback (most recent call last):\n"
        "OSError: image file is truncated (3 bytes not processed)"
    )
    ev = Evidence(
        kind="exception",
        stage="fetch",
        in_flight_index=37,
        exception_type="OSError",
        exception_message="image file is truncated (3 bytes not processed)",
        traceback=HF_TRACEBACK,
    )
    assert diagnose(ev).cause == "sample-error"
    # the error's own words still decide
    ev.exception_message = "[Errno 24] Too many open files: '/data/0037.jpg'"
    assert diagnose(ev).cause == "fd-exhausted"


class _MosaicLike:  # the signatures of MosaicML streaming's and litdata's StreamingDataset
    def state_dict(self, num_samples: int, from_beginning: bool) -> dict[str, Any]:
        return {}

    def load_state_dict(self, obj: dict[str, Any]) -> None:
        pass


class _LitdataLike:
    def state_dict(self, num_samples_yielded: Any, num_workers: int, batch_size: int) -> Any:
        return {}

    def load_state_dict(self, state_dict: Any) -> None:
        pass


class _Stateful:  # torchdata's Stateful protocol
    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


def test_only_torchdatas_protocol_is_called_stateful() -> None:
    assert [is_stateful(d) for d in (_MosaicLike(), _LitdataLike(), _Stateful())] == [
        False,
        False,
        True,
    ]


class Numbers(IterableDataset[int]):
    """A stream whose state_dict() follows the protocol's signature and raises."""

    def __init__(self) -> None:
        self.read = 0

    def __iter__(self) -> Any:
        for i in range(20):
            self.read = i
            yield i

    def state_dict(self) -> dict[str, int]:
        raise RuntimeError("state is kept by the library's own loader")

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.read = state["read"]


@pytest.mark.slow
def test_a_state_dict_that_raises_turns_stream_state_off_and_the_job_goes_on() -> None:
    """The worker saves a stream's state with each batch (a healed worker resumes from it)."""
    stock = [b.tolist() for b in torch.utils.data.DataLoader(Numbers(), batch_size=4)]
    loader = DataLoader(Numbers(), batch_size=4, num_workers=1, heal=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = [b.tolist() for b in loader]
    assert got == stock
    said = [str(w.message) for w in caught if "turned off" in str(w.message)]
    assert said == [
        "loaderdoctor: stream-state turned off for this DataLoader: RuntimeError: state is kept "
        "by the library's own loader; streams resume by replaying their items, not from the "
        "dataset's state_dict() (a stream that cannot be replayed says so when it resumes)"
    ]
    assert loader.report.features_off == {
        "stream-state": "RuntimeError: state is kept by the library's own loader"
    }
    assert loader.report.status == "ok"


class OwnIterator(DataLoader):  # litdata's StreamingDataLoader overrides _get_iterator so
    def _get_iterator(self) -> Any:
        return torch.utils.data.dataloader._SingleProcessDataLoaderIter(self)


def test_a_loader_with_its_own_iterator_is_said_unsupervised_and_runs_as_stock() -> None:
    assert own_iterator_reason(DataLoader) is None
    reason = own_iterator_reason(OwnIterator)
    assert reason == (
        "test_containment.OwnIterator overrides DataLoader._get_iterator and builds its own "
        "iterator: its workers run without loaderdoctor's hooks (a worker death there is "
        "torch's own error) and its batches are not counted; this DataLoader runs as plain "
        "torch, unsupervised."
    )
    loader = OwnIterator(list(range(10)), batch_size=3)
    with pytest.warns(RuntimeWarning) as caught:
        got = [b.tolist() for b in loader]
    assert got == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]
    assert [str(w.message) for w in caught] == [reason]
    assert caught[0].filename == __file__


def test_a_stream_whose_library_coordinates_its_workers_declines_healing_at_once() -> None:
    from loaderdoctor.supervise.containment import COORDINATED_STREAMS, listed
    from loaderdoctor.supervise.heal_policy import ActionKind, HealPolicy, Situation

    # named as MosaicML's class is named; a user's subclass is found along its MRO
    mosaic = type("StreamingDataset", (), {"__module__": "streaming.base.dataset"})
    planted = type("Planted", (mosaic,), {"__module__": "train"})
    reason = listed(planted(), COORDINATED_STREAMS)
    assert reason is not None and reason.startswith("MosaicML streaming's StreamingDataset")
    assert listed(Numbers(), COORDINATED_STREAMS) is None
    at = Situation(
        heal=True, iterable=True, deaths_in_a_row=0, num_workers=2, prefetch_factor=2, kind="death"
    )
    killed = Diagnosis("killed-by-signal", "killed", 0.9, 0, 1, None, None, [], [], [])
    assert HealPolicy().decide(killed, at).kind is ActionKind.RESPAWN
    declined = HealPolicy().decide(killed, replace(at, not_resumable=reason))
    assert (declined.kind, declined.note) == (ActionKind.RAISE, f"not healed: {reason}")


def test_the_verdict_never_vouches_for_an_unsupervised_loader() -> None:
    from loaderdoctor.report.run_text import format_verdict
    from loaderdoctor.runner.model import UnsupervisedLoader
    from test_run_units import sample_report

    report = sample_report()
    report.incidents = []
    report.unsupervised_loaders = [
        UnsupervisedLoader("StreamingDataLoader", "train.py:21", "its own iterator", 1)
    ]
    assert format_verdict(report) == (
        "verdict: no supervised DataLoader worker died (1 ran unsupervised: a worker death "
        "there is torch's own error, above); the command failed"
    )
    report.exit_code = 0
    assert format_verdict(report) == (
        "verdict: no supervised DataLoader worker died (1 ran unsupervised)"
    )


class Bad(torch.utils.data.Dataset[int]):
    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int) -> int:
        if index == 5:
            raise ValueError(f"sample {index} is bad")
        return index


def test_each_incident_names_its_loader_by_its_line_and_name() -> None:
    train_loader = DataLoader(Bad(), batch_size=2, heal=True)
    val_loader = DataLoader(Bad(), batch_size=4, heal=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        list(train_loader), list(val_loader)
    line = test_each_incident_names_its_loader_by_its_line_and_name.__code__.co_firstlineno
    here = "tests/test_containment.py"
    assert [i.to_dict()["loader"] for i in [*train_loader.incidents, *val_loader.incidents]] == [
        f"train_loader ({here}:{line + 1})",
        f"val_loader ({here}:{line + 2})",
    ]


def test_the_verdict_names_the_loader_where_several_had_incidents() -> None:
    from loaderdoctor.report.run_text import format_verdict
    from test_run_units import sample_report

    report = sample_report()
    report.incidents[0].loader = "val_loader (train.py:41)"
    alone = format_verdict(report)
    assert "val_loader" not in alone
    report.incidents.append(replace(report.incidents[0], loader="train_loader (train.py:40)"))
    assert format_verdict(report) == f"{alone} in val_loader (train.py:41) (+1 more)"


class Stream(IterableDataset[int]):
    def __iter__(self) -> Any:
        info = torch.utils.data.get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        return iter(range(start, 24, step))


# Our hooks in a worker, each broken for real (a helper it calls is gone: forked workers inherit
# the patch): the worker's set-up, the fetch of a sample (raising and healing paths), the collate
# wrapper, a stream's batch.
PLANTED = {
    "worker-init": ("loaderdoctor.supervise.worker.hooks", ("_announce_temp_dir",), "map"),
    "fetch": ("loaderdoctor.recorder", ("WorkerSlot.fetching", "WorkerSlot.hot_path"), "map"),
    "collate": ("loaderdoctor.supervise.worker.collate", ("_with_stream_positions",), "map"),
    "stream": ("loaderdoctor.supervise.worker.datasets", ("item_key",), "stream"),
}


@pytest.mark.slow
@pytest.mark.parametrize("heal", [True, False], ids=["heal", "no-heal"])
@pytest.mark.parametrize("hook", list(PLANTED))
def test_a_failure_planted_in_each_of_our_hooks_leaves_the_jobs_batches_as_stocks(
    hook: str, heal: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib

    module_name, attributes, kind = PLANTED[hook]
    data: Any = Stream() if kind == "stream" else [torch.tensor([i]) for i in range(24)]
    stock = [b.tolist() for b in torch.utils.data.DataLoader(data, batch_size=4, num_workers=2)]
    for attribute in attributes:
        target: Any = importlib.import_module(module_name)
        *owners, name = attribute.split(".")
        for owner in owners:
            target = getattr(target, owner)
        monkeypatch.setattr(target, name, None)
    loader = DataLoader(data, batch_size=4, num_workers=2, heal=heal)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = [b.tolist() for b in loader]
    assert got == stock
    loud = [str(w.message).splitlines()[0] for w in caught if w.category is RuntimeWarning]
    assert loud == [
        "loaderdoctor's own machinery failed (internal-error, please report it); this "
        "DataLoader continues as a plain torch DataLoader, without supervision."
    ]
    assert [(i.diagnosis.cause, i.action) for i in loader.incidents] == [
        ("internal-error", "fell-back")
    ]


def test_a_warning_points_past_a_frameworks_frames_to_the_users_line() -> None:
    from loaderdoctor.supervise.heal import HealWarning, user_stacklevel

    # a framework's training loop (Composer's trainer.py, Ray's train_loop_utils.py) between the
    # user's call and the warning
    framework: dict[str, Any] = {"user_stacklevel": user_stacklevel, "warnings": warnings}
    source = (
        "def fit(loader):\n    warnings.warn('healed', HealWarning, stacklevel=user_stacklevel())\n"
    )
    framework["HealWarning"] = HealWarning
    exec(compile(source, "/venv/lib/site-packages/composer/trainer/trainer.py", "exec"), framework)
    with pytest.warns(HealWarning) as caught:
        framework["fit"](None)  # the user's line
    assert (caught[0].filename, caught[0].lineno) == (
        __file__,
        test_a_warning_points_past_a_frameworks_frames_to_the_users_line.__code__.co_firstlineno
        + 12,
    )


def test_a_quarantine_entry_names_its_loader(tmp_path: Any) -> None:
    from loaderdoctor.supervise.parent.quarantine import read_quarantine

    path = tmp_path / "quarantine.json"
    val_loader = DataLoader(Bad(), batch_size=4, heal=True, quarantine=path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        list(val_loader)
    line = test_a_quarantine_entry_names_its_loader.__code__.co_firstlineno + 4
    assert [(e.index, e.loader) for e in read_quarantine(path).values()] == [
        (5, f"val_loader (tests/test_containment.py:{line})")
    ]


def test_the_run_report_lists_a_feature_turned_off_with_its_loader(tmp_path: Any) -> None:
    from loaderdoctor.runner import core, protocol

    directory = protocol.incidents_dir(tmp_path)
    tmp_path.joinpath(directory).mkdir(parents=True)
    off = {
        "loader": "DataLoader",
        "site": "stream_loader (train.py:12)",
        "feature": "stream-state",
        "reason": "RuntimeError: state is kept by the library's own loader",
    }
    state = {"pid": 4000, "image": 1, "started": 1.0, "rank": None, "created": 1, "loaders": 1}
    protocol.write_json(protocol.state_path(directory, 4000, 1), {**state, "features_off": [off]})
    report = core.merge(
        tmp_path,
        command=["python", "train.py"],
        returncode=0,
        started_wall=0.0,
        duration_s=1.0,
        memory=None,
        interrupted=False,
    )
    assert report.notes == [
        "DataLoader at stream_loader (train.py:12): stream-state turned off (the rest "
        "supervised): RuntimeError: state is kept by the library's own loader"
    ]
