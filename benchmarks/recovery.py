"""How fast healing recovers from a worker death, against starting a fresh DataLoader.

Measured side by side in one process run, repeated and interleaved:
  * recovery: the time from a worker's death (the moment its SIGKILL is sent) to the next batch
    the training loop receives from a healing ``loaderdoctor.DataLoader``;
  * fresh start: the time a new stock ``torch.utils.data.DataLoader`` takes to deliver its first
    batch (what a user pays today to restart after a crash, before re-loading their place).

    python benchmarks/recovery.py [--repeats 7] [--workers 2] [--start-method fork]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import time
import warnings

import torch
from torch.utils.data import Dataset

import loaderdoctor
from loaderdoctor.supervise.heal import HealWarning


class Work(Dataset):
    """~1 ms of real work per sample; the sample at ``victim`` kills its worker with SIGKILL."""

    def __init__(self, n: int, victim: int, stamp: str) -> None:
        self.n, self.victim, self.stamp = n, victim, stamp
        self.weights = torch.randn(64, 64)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> torch.Tensor:
        if index == self.victim and torch.utils.data.get_worker_info() is not None:
            # Record the instant of death, then die the way the OOM killer kills.
            with open(self.stamp, "w") as handle:
                handle.write(repr(time.monotonic()))
            os.kill(os.getpid(), signal.SIGKILL)
        x = torch.full((64,), float(index))
        for _ in range(40):
            x = torch.tanh(self.weights @ x)
        return x


def recovery_seconds(workers: int, method: str | None, stamp: str) -> float:
    dataset = Work(n=512, victim=200, stamp=stamp)
    loader = loaderdoctor.DataLoader(
        dataset, batch_size=8, num_workers=workers, heal=True, multiprocessing_context=method
    )
    seen_incidents = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", HealWarning)
        for _batch in loader:
            if len(loader.incidents) > seen_incidents:
                # The first batch after the incident was recorded: the run is back on its feet.
                received = time.monotonic()
                with open(stamp) as handle:
                    died = float(handle.read())
                return received - died
    raise RuntimeError("the planted death did not happen")


def fresh_start_seconds(workers: int, method: str | None) -> float:
    dataset = Work(n=512, victim=-1, stamp=os.devnull)
    started = time.monotonic()
    loader = torch.utils.data.DataLoader(
        dataset, batch_size=8, num_workers=workers, multiprocessing_context=method
    )
    iterator = iter(loader)
    next(iterator)
    elapsed = time.monotonic() - started
    del iterator
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--start-method", default="fork")
    args = parser.parse_args()
    torch.set_num_threads(1)
    stamp = f"/tmp/loaderdoctor-recovery-{os.getpid()}"
    recoveries, fresh = [], []
    try:
        for _ in range(args.repeats):
            recoveries.append(recovery_seconds(args.workers, args.start_method, stamp))
            fresh.append(fresh_start_seconds(args.workers, args.start_method))
    finally:
        if os.path.exists(stamp):
            os.unlink(stamp)
    print(f"{args.workers} workers, {args.start_method}, {args.repeats} interleaved repeats")
    print(
        f"death -> next batch (healing):       median {statistics.median(recoveries):.3f} s  "
        f"(min {min(recoveries):.3f}, max {max(recoveries):.3f})"
    )
    print(
        f"fresh stock DataLoader first batch:  median {statistics.median(fresh):.3f} s  "
        f"(min {min(fresh):.3f}, max {max(fresh):.3f})"
    )
    print(f"ratio: {statistics.median(recoveries) / statistics.median(fresh):.2f}x")


if __name__ == "__main__":
    main()
