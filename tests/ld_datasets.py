"""Datasets shared by the tests. A module of its own so spawn/forkserver workers can import it."""

from __future__ import annotations

import random

import numpy as np
import torch
from torch.utils.data import Dataset, IterableDataset, get_worker_info


def quiet_result_queue(timeout: float = 30.0) -> None:
    """In a worker, wait until its result queue has written every batch it was given (the
    feeder thread done, the writer lock free), so that a death planted next happens between
    two writes, as a crash in ``__getitem__`` usually does. A death while the feeder thread
    writes (the lock held for ever) is a different, real case that the "locked"/"half-sent"
    tests plant on purpose; without this, load decides which case a test gets."""
    import sys
    import time

    frame = sys._getframe()
    while frame is not None and frame.f_code.co_name != "_worker_loop":
        frame = frame.f_back
    data_queue = None if frame is None else frame.f_locals.get("data_queue")
    if data_queue is None:
        return
    deadline = time.monotonic() + timeout
    while getattr(data_queue, "_buffer", None) and time.monotonic() < deadline:
        time.sleep(0.005)
    lock = getattr(data_queue, "_wlock", None)
    if lock is not None and lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
        lock.release()


def two_epochs(loader) -> tuple[list[list[int]], list[int]]:
    """Receive two epochs of ``loader`` as a training loop does, heal warnings silenced: each
    epoch's samples (a batch's rows, by their first column) and the size of every batch
    received, in order (what the report's delivered counts must equal)."""
    import warnings

    from loaderdoctor.supervise.heal import HealWarning

    received: list[int] = []
    epochs: list[list[int]] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", HealWarning)
        for _ in range(2):
            rows: list[int] = []
            for batch in loader:
                received.append(len(batch))
                rows.extend(int(row[0]) for row in batch)
            epochs.append(rows)
    return epochs, received


class RandomAugmented(Dataset):
    """Each sample mixes the index with torch, numpy and random draws: seeds must match exactly."""

    def __init__(self, n: int = 37) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int):
        return {
            "x": torch.full((2,), float(index)) + torch.rand(2),
            "np": float(np.random.rand()),
            "py": random.random(),
            "index": index,
        }


class BatchedDataset(RandomAugmented):
    def __getitems__(self, indices):
        return [self[i] for i in indices]


class ShardedStream(IterableDataset):
    """An IterableDataset sharded by worker through get_worker_info(), as the torch docs show."""

    def __init__(self, start: int = 0, end: int = 30) -> None:
        self.start, self.end = start, end

    def __iter__(self):
        info = get_worker_info()
        if info is None:
            lo, hi = self.start, self.end
        else:
            per = -(-(self.end - self.start) // info.num_workers)
            lo = self.start + info.id * per
            hi = min(lo + per, self.end)
        for value in range(lo, hi):
            yield torch.tensor([value]) + torch.rand(1)


class ConfiguredByInit(IterableDataset):
    """worker_init_fn configures the dataset through get_worker_info().dataset."""

    def __init__(self) -> None:
        self.values: list[int] = list(range(12))

    def __iter__(self):
        return iter(self.values)


def shard_by_worker(worker_id: int) -> None:
    info = get_worker_info()
    dataset = info.dataset
    dataset.values = dataset.values[worker_id :: info.num_workers]


def pairs_batch_sampler(n: int):
    return [[i, n - 1 - i] for i in range(n // 2)]


class Faulty(Dataset):
    """Fails at ``bad`` in the way named by ``mode``; with ``once_flag`` only the first time."""

    def __init__(self, mode: str, bad: int = 5, n: int = 24, once_flag: str | None = None) -> None:
        self.mode, self.bad, self.n, self.once_flag = mode, bad, n, once_flag
        self.samples = [(f"/data/img_{i:03d}.jpg", i % 3) for i in range(n)]

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int):
        if index == self.bad:
            import os

            if self.once_flag is not None:
                if os.path.exists(self.once_flag):
                    return torch.tensor([index])
                open(self.once_flag, "w").close()
            if self.mode == "segv":
                import ctypes

                ctypes.string_at(0)
            elif self.mode == "key":
                raise KeyError(f"no label for {index}")
            elif self.mode == "sleep":
                import time

                time.sleep(120)
        return torch.tensor([index])


class FaultyStream(IterableDataset):
    def __iter__(self):
        for position in range(10):
            if position == 4:
                raise OSError(f"stream broke at {position}")
            yield torch.tensor([position])


class Ledger(Dataset):
    """Returns its index; ``faults`` maps index -> how that sample fails.

    raise / raise-once: ValueError (always / the first time only); kill / kill-once: the worker
    SIGKILLs itself; kill-once-when-collated: it does so the first time, once a batch has
    collated (``TouchingCollate``); hang: sleeps far past any hang timeout; ragged: a sample of another
    shape. "-once" faults remember in ``flag_dir`` that they fired.
    """

    def __init__(self, n: int, faults: dict[int, str], flag_dir: str) -> None:
        self.n, self.faults, self.flag_dir = n, dict(faults), flag_dir

    def __len__(self) -> int:
        return self.n

    def _first_time(self, index: int) -> bool:
        import os

        flag = os.path.join(self.flag_dir, f"fired-{index}")
        if os.path.exists(flag):
            return False
        open(flag, "w").close()
        return True

    def __getitem__(self, index: int):
        import os
        import signal
        import time

        fault = self.faults.get(index)
        if fault == "raise" or (fault == "raise-once" and self._first_time(index)):
            raise ValueError(f"bad sample {index}")
        if fault == "kill" or (fault == "kill-once" and self._first_time(index)):
            if torch.utils.data.get_worker_info() is not None:
                os.kill(os.getpid(), signal.SIGKILL)
            raise RuntimeError(f"would kill the main process at {index}")
        in_worker = torch.utils.data.get_worker_info() is not None
        if fault == "kill-once-when-collated" and in_worker and self._first_time(index):
            collated = os.path.join(self.flag_dir, "collated")
            deadline = time.monotonic() + 120  # bounded: a broken run fails, it does not hang
            while not os.path.exists(collated) and time.monotonic() < deadline:
                time.sleep(0.01)
            os.kill(os.getpid(), signal.SIGKILL)
        if fault == "hang" and torch.utils.data.get_worker_info() is not None:
            time.sleep(600)
        if fault == "ragged":
            return torch.tensor([index, index])
        return torch.tensor([index])


class StreamLedger(torch.utils.data.IterableDataset):
    """Items 0..n-1, each worker its share by ``get_worker_info()`` (a generator); ``faults``
    maps item -> raise / raise-once / kill / kill-once, as ``Ledger``'s ("-once": in
    ``flag_dir``)."""

    def __init__(self, n: int, faults: dict[int, str], flag_dir: str) -> None:
        self.n, self.faults, self.flag_dir = n, dict(faults), flag_dir

    def __iter__(self):
        import os
        import signal

        info = torch.utils.data.get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        for i in range(worker, self.n, workers):
            fault = self.faults.get(i)
            first = False
            if fault in ("raise-once", "kill-once"):
                flag = os.path.join(self.flag_dir, f"fired-{i}")
                first = not os.path.exists(flag)
                if first:
                    open(flag, "w").close()
            if fault == "raise" or (fault == "raise-once" and first):
                raise ValueError(f"bad item {i}")
            if fault == "kill" or (fault == "kill-once" and first):
                quiet_result_queue()
                os.kill(os.getpid(), signal.SIGKILL)
            yield torch.tensor([i])


class TouchingCollate:
    """torch's default collate that first leaves a file in ``flag_dir``: a batch has collated
    (its samples' skips were recorded), for ``Ledger``'s "kill-when-collated"."""

    def __init__(self, flag_dir: str) -> None:
        self.flag_dir = flag_dir

    def __call__(self, samples):
        import os

        open(os.path.join(self.flag_dir, "collated"), "w").close()
        return torch.utils.data.default_collate(samples)


class BatchFetched(Dataset):
    """Loads a whole batch at once with its own ``__getitems__`` (as Hugging Face
    ``datasets.Dataset`` does, its transform applied to the batch), so no per-sample call of
    the loader's passes between the batch's samples. ``faults`` as ``Ledger``'s: segv, kill,
    kill-once, raise (``flag_dir`` remembers "-once")."""

    def __init__(self, n: int, faults: dict[int, str], flag_dir: str) -> None:
        self.n, self.faults, self.flag_dir = n, dict(faults), flag_dir

    def __len__(self) -> int:
        return self.n

    def _load(self, index: int) -> dict:
        import ctypes
        import os
        import signal

        fault = self.faults.get(index)
        once = fault == "kill-once"
        if once:
            flag = os.path.join(self.flag_dir, f"fired-{index}")
            once = not os.path.exists(flag)
            if once:
                open(flag, "w").close()
        in_worker = torch.utils.data.get_worker_info() is not None
        if fault in ("segv", "kill") or once:
            quiet_result_queue()
        if fault == "segv" and in_worker:
            ctypes.string_at(0)
        if (fault == "kill" or once) and in_worker:
            os.kill(os.getpid(), signal.SIGKILL)
        if fault == "raise":
            raise ValueError(f"bad sample {index}")
        return {"index": index}

    def __getitem__(self, index: int) -> dict:
        return self.__getitems__([index])[0]

    def __getitems__(self, indices: list[int]) -> list[dict]:
        rows = {"index": [self._load(i)["index"] for i in indices]}  # the batch at once
        return [{"index": value} for value in rows["index"]]
