"""Load a few batches of the user's dataset in a forked worker and measure what they cost.

Core-only helper of ``env.core``: a real child process (fork, as a DataLoader worker on Linux)
collates real batches; the parent waits at most ``timeout_s`` and kills what it started.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import signal
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from loaderdoctor.system.limits import count_open_fds


@dataclass
class LoaderParts:
    dataset: Any
    collate_fn: Any
    batch_sampler: Any  # an iterable of index lists, or None
    batch_size: int | None  # None: the DataLoader does not batch (each sample is a batch)
    num_workers: int | None
    prefetch_factor: int | None
    is_dataloader: bool
    extras: tuple[Any, ...] = ()  # worker_init_fn etc.: pickled along with the dataset


@dataclass
class LoadProbe:
    batches: int = 0
    batch_bytes: int | None = None  # the largest batch's tensor storage, deduplicated
    storages_per_batch: int | None = None  # tensors shared per batch: one fd each in flight
    rss_start: int | None = None
    rss_peak: int | None = None
    uss_peak: int | None = None  # private memory: what each worker adds on top of the parent
    fds_start: int | None = None
    fds_end: int | None = None
    picklable: bool | None = None
    pickle_bytes: int | None = None
    pickle_error: str | None = None
    error: str | None = None
    internal_error: str | None = None  # loaderdoctor's own failure while measuring (a bug)
    elapsed_s: float = 0.0


def loader_parts(target: object, batch_size: int | None) -> LoaderParts:
    from torch.utils.data import DataLoader, default_collate

    if isinstance(target, DataLoader):
        return LoaderParts(
            dataset=target.dataset,
            collate_fn=target.collate_fn,
            batch_sampler=target.batch_sampler if batch_size is None else None,
            batch_size=target.batch_size if batch_size is None else batch_size,
            num_workers=target.num_workers,
            prefetch_factor=target.prefetch_factor,
            is_dataloader=True,
            extras=(target.collate_fn, target.worker_init_fn),
        )
    return LoaderParts(target, default_collate, None, batch_size or 1, None, None, False)


def describe(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__


def run_load_probe(parts: LoaderParts, max_batches: int = 3, timeout_s: float = 8.0) -> LoadProbe:
    probe = LoadProbe()
    started = time.monotonic()
    try:
        context = multiprocessing.get_context("fork")
    except ValueError:
        probe.error = "the fork start method is not available here"
        return probe
    receiver, sender = context.Pipe(duplex=False)
    process = context.Process(target=_child, args=(sender, parts, max_batches), daemon=True)
    process.start()
    sender.close()
    deadline = started + timeout_s
    try:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not receiver.poll(remaining):
                probe.error = probe.error or (
                    f"stopped after {timeout_s:.0f} s with {probe.batches} batch(es) loaded"
                )
                break
            try:
                message = receiver.recv()
            except EOFError:
                process.join(1.0)
                probe.error = f"the probe worker died ({_exit_reason(process.exitcode)})"
                break
            if message[0] == "done":
                break
            _record(probe, message)
    finally:
        if process.is_alive():
            process.kill()
        process.join(2.0)
        receiver.close()
        probe.elapsed_s = time.monotonic() - started
    return probe


def _exit_reason(exitcode: int | None) -> str:
    if exitcode is None:
        return "still running"
    if exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exit code {exitcode}"


def _record(probe: LoadProbe, message: tuple[Any, ...]) -> None:
    kind = message[0]
    if kind == "start":
        probe.rss_start, probe.uss_peak, probe.fds_start = message[1], message[2], message[3]
        probe.rss_peak = probe.rss_start
    elif kind == "batch":
        _, nbytes, storages, rss, uss, fds = message
        probe.batches += 1
        probe.batch_bytes = max(probe.batch_bytes or 0, nbytes)
        probe.storages_per_batch = max(probe.storages_per_batch or 0, storages)
        probe.rss_peak = max(probe.rss_peak or 0, rss)
        probe.uss_peak = max(probe.uss_peak or 0, uss)
        probe.fds_end = fds
    elif kind == "error":
        probe.error = message[1]
    elif kind == "internal-error":
        probe.internal_error = message[1]
        probe.error = probe.error or f"loaderdoctor failed while measuring: {message[1]}"
    elif kind == "pickle":
        probe.picklable, probe.pickle_bytes, probe.pickle_error = message[1], message[2], message[3]


class _CountingSink:
    """A file for pickle that keeps only the byte count: sizing a dataset costs no memory."""

    def __init__(self) -> None:
        self.size = 0

    def write(self, data: bytes) -> int:
        self.size += len(data)
        return len(data)


def _child(sender: Connection, parts: LoaderParts, max_batches: int) -> None:
    try:
        _measure(sender, parts, max_batches)
    except Exception as error:  # a bug of ours, not the dataset's: the parent logs and counts it
        where = traceback.extract_tb(error.__traceback__)[-1]
        sender.send(
            (
                "internal-error",
                f"{describe(error)} ({os.path.basename(where.filename)}:{where.lineno})",
            )
        )
    finally:
        sender.send(("done",))
        sender.close()
        os._exit(0)  # no atexit handlers, no flushing of the parent's buffers


def _measure(sender: Connection, parts: LoaderParts, max_batches: int) -> None:
    import psutil

    process = psutil.Process()

    def memory() -> tuple[int, int]:
        info = process.memory_full_info()
        return int(info.rss), int(info.uss)

    rss, uss = memory()
    sender.send(("start", rss, uss, count_open_fds()))
    batches = _batches(parts)
    for _ in range(max_batches):
        try:
            batch = next(batches)
        except StopIteration:
            break
        except SampleFailed as failed:  # the dataset's own failure: what the probe is there to see
            sender.send(("error", f"loading a batch raised {describe(failed.error)}{failed.where}"))
            break
        except Exception as error:  # in collate_fn or a batch_sampler: no one sample to name
            sender.send(("error", f"loading a batch raised {describe(error)}"))
            break
        nbytes, storages = batch_nbytes(batch)
        del batch
        rss, uss = memory()
        sender.send(("batch", nbytes, storages, rss, uss, count_open_fds()))
    sink = _CountingSink()
    try:
        # plain pickle, not ForkingPickler: it would move tensors into shared memory
        pickle.Pickler(sink, protocol=pickle.HIGHEST_PROTOCOL).dump((parts.dataset, *parts.extras))
    except Exception as error:  # the dataset does not pickle: a finding about it, not a bug
        sender.send(("pickle", False, None, describe(error)))
    else:
        sender.send(("pickle", True, sink.size, None))


class SampleFailed(Exception):
    """``dataset[index]`` raised: the error, and where (the index, and the file where the dataset
    names one), so that a first batch holding one bad image names it."""

    def __init__(self, error: BaseException, index: int, dataset: Any) -> None:
        super().__init__(str(error))
        from loaderdoctor.supervise.samples import sample_file

        self.error = error
        file = sample_file(dataset, index)
        self.where = f" (sample {index}" + (f", {file}" if file else "") + ")"


def fetch(dataset: Any, index: int) -> Any:
    try:
        return dataset[index]
    except Exception as error:  # the user's dataset raises anything
        raise SampleFailed(error, index, dataset) from error


def _batches(parts: LoaderParts) -> Iterator[Any]:
    dataset = parts.dataset
    if parts.batch_size is None:  # automatic batching off: collate_fn converts single samples
        for index, sample in enumerate(_samples(dataset)):
            yield parts.collate_fn(sample)
            if index > 64:
                return
        return
    if parts.batch_sampler is not None:
        for indices in parts.batch_sampler:
            yield parts.collate_fn([fetch(dataset, index) for index in indices])
        return
    batch: list[Any] = []
    for sample in _samples(dataset):
        batch.append(sample)
        if len(batch) == parts.batch_size:
            yield parts.collate_fn(batch)
            batch = []
    if batch:
        yield parts.collate_fn(batch)


def _samples(dataset: Any) -> Iterator[Any]:
    from torch.utils.data import IterableDataset

    if not isinstance(dataset, IterableDataset) and hasattr(dataset, "__len__"):
        for index in range(len(dataset)):
            yield fetch(dataset, index)
    else:
        yield from iter(dataset)


def batch_nbytes(batch: Any) -> tuple[int, int]:
    """Bytes of tensor storage in a collated batch (each storage once) and how many storages."""
    import torch

    seen: dict[int, int] = {}
    stack = [batch]
    while stack:
        item = stack.pop()
        if isinstance(item, torch.Tensor):
            storage = item.untyped_storage()
            seen[storage.data_ptr()] = storage.nbytes()
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
        elif hasattr(item, "nbytes") and isinstance(getattr(item, "nbytes", None), int):
            seen[id(item)] = int(item.nbytes)  # numpy arrays a custom collate_fn left as they are
    return sum(seen.values()), len(seen)
