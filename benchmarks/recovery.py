"""How fast healing recovers from a worker death, against starting a fresh DataLoader.

Each worker takes ``--startup`` seconds to start (a ``worker_init_fn`` that sleeps, as opening an
index, an LMDB or a tokenizer does). Measured side by side in one process run, repeated and
interleaved, at each worker count:
  * respawn alone: the time from a worker's death (the instant it calls ``os._exit``, once, in
    the middle of a sample) to the next batch a healing ``loaderdoctor.DataLoader`` delivers.
    The dead worker alone is replaced; the sample is first re-tried alone in a fresh worker (the
    probe that tells a bad sample from a flaky machine), so this is about two start-ups;
  * whole pool: the same death healed the way it was before one worker could be replaced alone (every worker stopped and
    a new pool started), for comparison;
  * fresh start: the time a new stock ``torch.utils.data.DataLoader`` takes to deliver its first
    batch (what a user pays today to restart after a crash, before re-loading their place).

    python benchmarks/recovery.py [--repeats 3] [--workers 2 8 16] [--startup 1.0]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch.utils.data import Dataset

import loaderdoctor
from loaderdoctor.supervise.heal import HealWarning
from loaderdoctor.supervise.parent import recovery

BATCH_SIZE = 8


class Work(Dataset):
    """~1 ms of real work per sample; sample ``victim`` makes its worker exit, the first time."""

    def __init__(self, n: int, victim: int, flag_dir: str) -> None:
        self.n, self.victim, self.flag_dir = n, victim, flag_dir
        self.weights = torch.randn(64, 64)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> torch.Tensor:
        if index == self.victim and torch.utils.data.get_worker_info() is not None:
            flag = os.path.join(self.flag_dir, "died")
            if not os.path.exists(flag):
                # Record the instant of death (CLOCK_MONOTONIC is one clock for all processes).
                with open(flag, "w") as handle:
                    handle.write(repr(time.monotonic()))
                os._exit(3)
        x = torch.full((64,), float(index))
        for _ in range(40):
            x = torch.tanh(self.weights @ x)
        return x


class SlowStart:
    """A worker_init_fn that takes ``seconds``, as a dataset that opens its files does."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __call__(self, worker_id: int) -> None:
        time.sleep(self.seconds)


@contextmanager
def whole_pool_healing() -> Iterator[None]:
    """Heal as before one worker could be replaced alone: every death rebuilds the whole pool."""
    cls = recovery.Recovery
    original = cls.can_replace
    cls.can_replace = lambda self, action, at, ev: False  # type: ignore[method-assign]
    try:
        yield
    finally:
        cls.can_replace = original  # type: ignore[method-assign]


def recovery_seconds(workers: int, startup: float, method: str, alone: bool) -> float:
    flag_dir = tempfile.mkdtemp(prefix="loaderdoctor-recovery-")
    try:
        # the victim is far enough in that every worker has started and delivered
        dataset = Work(
            n=BATCH_SIZE * workers * 6, victim=BATCH_SIZE * workers * 3 + 1, flag_dir=flag_dir
        )
        loader = loaderdoctor.DataLoader(
            dataset,
            batch_size=BATCH_SIZE,
            num_workers=workers,
            heal=True,
            worker_init_fn=SlowStart(startup),
            multiprocessing_context=method,
        )
        with warnings.catch_warnings(), whole_pool_healing() if not alone else _nothing():
            warnings.simplefilter("ignore", HealWarning)
            warnings.simplefilter("ignore", UserWarning)  # more workers than cores
            iterator = iter(loader)
            try:
                for _batch in iterator:
                    if loader.incidents:
                        # The first batch after the incident: the run is back on its feet.
                        received = time.monotonic()
                        with open(os.path.join(flag_dir, "died")) as handle:
                            return received - float(handle.read())
            finally:
                del iterator
        raise RuntimeError("the planted death did not happen")
    finally:
        shutil.rmtree(flag_dir, ignore_errors=True)


@contextmanager
def _nothing() -> Iterator[None]:
    yield


def fresh_start_seconds(workers: int, startup: float, method: str) -> float:
    dataset = Work(n=BATCH_SIZE * workers * 2, victim=-1, flag_dir=os.devnull)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        started = time.monotonic()
        loader = torch.utils.data.DataLoader(
            dataset,
            batch_size=BATCH_SIZE,
            num_workers=workers,
            worker_init_fn=SlowStart(startup),
            multiprocessing_context=method,
        )
        iterator = iter(loader)
        next(iterator)
        elapsed = time.monotonic() - started
        del iterator
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", type=int, nargs="+", default=[2, 8, 16])
    parser.add_argument("--startup", type=float, default=1.0, help="seconds per worker start-up")
    parser.add_argument("--start-method", default="fork")
    args = parser.parse_args()
    torch.set_num_threads(1)
    # more workers than this machine's cores, on purpose
    warnings.filterwarnings("ignore", "This DataLoader will create")
    times: dict[tuple[int, str], list[float]] = {}
    for _ in range(args.repeats):
        for workers in args.workers:
            for kind in ("alone", "whole", "fresh"):
                if kind == "fresh":
                    seconds = fresh_start_seconds(workers, args.startup, args.start_method)
                else:
                    seconds = recovery_seconds(
                        workers, args.startup, args.start_method, alone=kind == "alone"
                    )
                times.setdefault((workers, kind), []).append(seconds)
    print(
        f"{args.start_method}, worker start-up {args.startup:.1f} s, {args.repeats} interleaved "
        f"repeats, {os.cpu_count()} CPUs; medians (min-max), seconds"
    )
    print(
        f"{'workers':>7}  {'respawn alone':>20}  {'whole pool (before)':>20}  "
        f"{'fresh stock first batch':>23}  {'alone/fresh':>11}  {'whole/fresh':>11}"
    )

    def cell(values: list[float]) -> str:
        return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"

    for workers in args.workers:
        alone, whole, fresh = (times[(workers, k)] for k in ("alone", "whole", "fresh"))
        fresh_median = statistics.median(fresh)
        print(
            f"{workers:>7}  {cell(alone):>20}  {cell(whole):>20}  {cell(fresh):>23}  "
            f"{statistics.median(alone) / fresh_median:>10.2f}x  "
            f"{statistics.median(whole) / fresh_median:>10.2f}x"
        )


if __name__ == "__main__":
    main()
