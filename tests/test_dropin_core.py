"""The supervised core is a drop-in for torch's: lifetimes, generics, exception types, keywords.

Each behaviour is checked side by side with stock torch where torch's is observable.
"""

from __future__ import annotations

import gc
import pickle
import typing
import warnings
import weakref
from collections.abc import Iterator
from typing import TypeVar

import pytest
import torch

import loaderdoctor
from conftest import run_python
from ld_datasets import Faulty
from loaderdoctor import torch_compat
from loaderdoctor.supervise import loader as supervised_loader

T = TypeVar("T")

# A dropped iterator's workers stop by refcount (gc disabled; fork, spawn and forkserver,
# persistent or not, torch's and ours, with no __del__ noise): test_dropin's
# test_dropped_iterator_workers_exit_with_gc_disabled.


@pytest.fixture
def gc_disabled() -> Iterator[None]:
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _dataset() -> list[torch.Tensor]:
    return [torch.tensor([i]) for i in range(64)]


@pytest.mark.slow
def test_the_iterator_does_not_hold_its_loader(gc_disabled: None) -> None:
    loader = loaderdoctor.DataLoader(
        _dataset(), batch_size=4, num_workers=1, persistent_workers=True
    )
    iterator = iter(loader)
    next(iterator)
    dropped = weakref.ref(loader)
    del loader
    assert dropped() is None  # with persistent workers, torch's loader holds the iterator only
    del iterator


@pytest.mark.slow
def test_no_del_noise_in_forked_children() -> None:
    # An old iterator still alive when a new loader forks its workers: its finalizers must not
    # run (and complain) in the children, nor remove the parent's files. Two loaders show it
    # (stock torch complains twice); one batch each, as torch's cyclic collection of a persistent
    # iterator waits 5 s (its join timeout) for each worker that still has batches to hand over.
    script = (
        "import gc, torch, loaderdoctor\n"
        "def collect(_):\n"
        "    gc.collect()\n"
        "if __name__ == '__main__':\n"
        "    data = [torch.tensor([i]) for i in range(2)]\n"
        "    for epoch in range(2):\n"
        "        loader = loaderdoctor.DataLoader(data, batch_size=2, num_workers=2,\n"
        "            persistent_workers=True, worker_init_fn=collect)\n"
        "        it = iter(loader)\n"
        "        next(it)\n"
        "        cycle = [it]\n"
        "        cycle.append(cycle)  # only a cyclic collection frees it\n"
        "        del it, loader, cycle\n"
        "    gc.collect()\n"
        "    print('done', flush=True)\n"
    )
    result = run_python(["-c", script], timeout=120)
    assert result.stdout.strip() == "done", result.stderr[-3000:]
    assert "Exception ignored" not in result.stderr, result.stderr[-3000:]
    assert "can only test a child process" not in result.stderr


def test_dataloader_is_generic_like_torch() -> None:
    alias = loaderdoctor.DataLoader[list[torch.Tensor]]
    assert typing.get_origin(alias) is loaderdoctor.DataLoader
    assert typing.get_args(alias) == (list[torch.Tensor],)
    assert typing.get_args(torch.utils.data.DataLoader[list[torch.Tensor]]) == typing.get_args(
        alias
    )


def test_stateful_dataloader_is_generic_like_torchdatas() -> None:
    pytest.importorskip("torchdata", reason="torchdata is an extra (the eco extra has it)")
    from torchdata.stateful_dataloader import StatefulDataLoader

    alias = loaderdoctor.StatefulDataLoader[list[torch.Tensor]]
    assert typing.get_origin(alias) is loaderdoctor.StatefulDataLoader
    assert typing.get_args(alias) == typing.get_args(StatefulDataLoader[list[torch.Tensor]])
    loader = alias(torch.utils.data.TensorDataset(torch.arange(4)), batch_size=2)
    assert loader.__orig_class__ is alias
    assert [batch.tolist() for (batch,) in loader] == [[0, 1], [2, 3]]

    class Tagged(loaderdoctor.StatefulDataLoader[T]):
        pass

    assert Tagged.__parameters__ == (T,)
    assert typing.get_args(Tagged[int]) == (int,)


def _unpicklable_init(method: str, loader_class: type) -> tuple[type, list[str], object]:
    def init(_worker_id: int) -> None:  # a local function: spawn cannot pickle it
        pass

    loader = loader_class(
        _dataset(), batch_size=2, num_workers=1, multiprocessing_context=method, worker_init_fn=init
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            iter(loader)
        except Exception as error:  # compared below: the type must be torch's
            return type(error), [str(w.message).split(".")[0] for w in caught], error
    raise AssertionError("workers started with an unpicklable worker_init_fn")


@pytest.mark.slow
@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_start_failure_keeps_torchs_exception_type_and_warning(method: str) -> None:
    torch_type, torch_warnings, _ = _unpicklable_init(method, torch.utils.data.DataLoader)
    our_type, our_warnings, error = _unpicklable_init(method, loaderdoctor.DataLoader)
    assert our_type is torch_type
    assert issubclass(our_type, (AttributeError, pickle.PicklingError, TypeError))
    assert "Got pickle error when attempting to start a worker Process" in our_warnings
    assert [w for w in torch_warnings if w.startswith("Got pickle")] == [
        w for w in our_warnings if w.startswith("Got pickle")
    ]
    diagnosis = error.diagnosis  # type: ignore[attr-defined]
    assert diagnosis.cause == "unpicklable"
    assert any(
        note.startswith("loaderdoctor verdict: Something that must cross between processes")
        for note in error.__notes__
    )


@pytest.mark.slow
def test_worker_exception_keeps_its_type() -> None:
    for loader_class in (torch.utils.data.DataLoader, loaderdoctor.DataLoader):
        with pytest.raises(KeyError) as caught:
            list(loader_class(Faulty("key"), batch_size=4, num_workers=1))
        assert type(caught.value) is KeyError


def test_an_unknown_keyword_gets_torchs_own_type_error() -> None:
    with pytest.raises(TypeError) as stock:
        torch.utils.data.DataLoader(_dataset(), worker_method="thread")  # type: ignore[call-arg]
    with pytest.raises(TypeError) as ours:
        loaderdoctor.DataLoader(_dataset(), worker_method="thread")
    assert str(ours.value) == str(stock.value)


@pytest.mark.slow
def test_a_keyword_the_supervision_does_not_know_runs_plain_torch_with_one_warning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Stand-in for a keyword a newer torch adds: torch accepts it, loaderdoctor does not know it.
    known = supervised_loader.KNOWN_TORCH_KEYWORDS - {"in_order"}
    monkeypatch.setattr(supervised_loader, "KNOWN_TORCH_KEYWORDS", known)
    monkeypatch.setattr(supervised_loader, "_warned", set())
    loader = loaderdoctor.DataLoader(_dataset(), batch_size=8, num_workers=2, in_order=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = [batch.tolist() for batch in loader]
        second = [batch.tolist() for batch in loader]
    messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert messages == [
        "loaderdoctor does not know the DataLoader keyword(s) in_order of this torch release: "
        "this DataLoader runs as plain torch, unsupervised."
    ]
    stock = [
        b.tolist() for b in torch.utils.data.DataLoader(_dataset(), batch_size=8, num_workers=2)
    ]
    assert first == second == stock
    assert type(iter(loader)) is torch_compat.MultiProcessingIter


def test_a_torch_outside_the_declared_range_runs_plain_with_one_warning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(torch_compat, "SUPPORTED", False)
    monkeypatch.setattr(torch_compat, "SUPPORTED_RANGE", ">=9.0")
    monkeypatch.setattr(supervised_loader, "_warned", set())
    loader = loaderdoctor.DataLoader(_dataset(), batch_size=16)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        batches = [list(loader) for _ in range(3)]
    assert [str(w.message) for w in caught] == [
        f"loaderdoctor supports torch >=9.0, this is torch {torch.__version__}: this DataLoader "
        "runs as plain torch, unsupervised."
    ]
    assert len(batches[2]) == 4
    assert type(iter(loader)) is torch_compat.SingleProcessIter


@pytest.mark.parametrize(
    ("version", "specifier", "inside"),
    [
        ("2.13.0+cpu", ">=2.4,<2.15", True),
        ("2.15.0", ">=2.4,<2.15", False),
        ("2.3.1", ">=2.4", False),
        ("2.4.0a0+git123", ">=2.4", True),
        ("2.4", ">=2.4.0", True),
    ],
)
def test_version_range(version: str, specifier: str, inside: bool) -> None:
    assert torch_compat.in_range(version, specifier) is inside


def test_the_pinned_torch_is_inside_the_tested_range() -> None:
    assert torch_compat.SUPPORTED_RANGE == torch_compat.TESTED_TORCH_RANGE
    assert torch_compat.SUPPORTED  # CI runs the pinned release


@pytest.mark.slow
@pytest.mark.parametrize("heal", [False, True])
def test_a_failed_or_healed_iterator_is_freed_by_refcount(heal: bool, gc_disabled: None) -> None:
    loader = loaderdoctor.DataLoader(Faulty("segv"), batch_size=2, num_workers=2, heal=heal)
    iterator = iter(loader)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            for _ in iterator:
                pass
        except loaderdoctor.WorkerDiedError:
            assert not heal
    assert [i.action for i in loader.incidents] == (["quarantined"] if heal else ["raised"])
    dropped = weakref.ref(iterator)
    del iterator, loader
    assert dropped() is None
