"""The chaos harness's long form: a healing loader soaked for many epochs while a thread SIGKILLs a
random worker every few seconds and 1 % of the samples segfault their worker.

    python benchmarks/soak.py --minutes 10

Runs two soaks one after the other, ``persistent_workers`` off and on (each half the time), with
the same data set: ``--samples`` samples of ``--sample-ms`` of work each, every hundredth of them a
real SIGSEGV. After every epoch a ledger checks that each healthy sample arrived exactly once and
that no bad one did; at the end it prints, per soak, the epochs, samples, kills, incidents, the
report's status against the ledger, the pool size at the end, and the main process's RSS growth per
incident. Exits 1 when a promise broke (a sample lost or doubled, a wrong status, an exception).
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import os
import random
import signal
import sys
import threading
import time
import warnings
from collections import Counter
from typing import Any

import psutil
import torch
import torch.utils.data

import loaderdoctor


class Soaked(torch.utils.data.Dataset):
    def __init__(self, samples: int, sample_ms: float, bad: frozenset[int]) -> None:
        self.samples = samples
        self.sample_s = sample_ms / 1000
        self.bad = bad

    def __len__(self) -> int:
        return self.samples

    def __getitem__(self, index: int) -> int:
        if index in self.bad:
            ctypes.string_at(0)
        time.sleep(self.sample_s)
        return index


class Killer(threading.Thread):
    """SIGKILLs one of this process's children (a worker, a replacement, a probe) every
    ``low``..``high`` seconds."""

    def __init__(self, low: float, high: float, seed: int) -> None:
        super().__init__(daemon=True)
        self.low, self.high = low, high
        self.rng = random.Random(seed)
        self.stopped = threading.Event()
        self.kills = 0

    def run(self) -> None:
        while not self.stopped.wait(self.rng.uniform(self.low, self.high)):
            children = [
                c for c in psutil.Process().children() if "resource_tracker" not in _line(c)
            ]
            if not children:
                continue
            try:
                self.rng.choice(children).send_signal(signal.SIGKILL)
                self.kills += 1
            except psutil.Error:
                pass


def _line(process: psutil.Process) -> str:
    try:
        return " ".join(process.cmdline())
    except psutil.Error:
        return ""


def rss() -> int:
    return psutil.Process().memory_info().rss


def soak(args: argparse.Namespace, persistent: bool, seconds: float) -> dict[str, Any]:
    rng = random.Random(args.seed)
    bad = frozenset(rng.sample(range(args.samples), args.samples // 100))
    healthy = Counter(i for i in range(args.samples) if i not in bad)
    loader = loaderdoctor.DataLoader(
        Soaked(args.samples, args.sample_ms, bad),
        batch_size=args.batch_size,
        shuffle=True,
        num_workers=args.workers,
        persistent_workers=persistent,
        heal=True,
        hang_timeout=60,
    )
    killer = Killer(args.kill_low, args.kill_high, args.seed)
    broken: list[str] = []
    epochs = 0
    samples = 0
    started = time.monotonic()
    rss_after_first: int | None = None
    incidents_after_first = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            for epoch in range(10**6):
                if time.monotonic() - started > seconds and epochs >= args.min_epochs:
                    break
                delivered = Counter(int(v) for batch in loader for v in batch)
                epochs += 1
                samples += sum(delivered.values())
                if delivered != healthy:
                    lost = sorted((healthy - delivered).elements())
                    doubled = sorted((delivered - healthy).elements())
                    broken.append(f"epoch {epoch}: lost {lost[:10]}, doubled or bad {doubled[:10]}")
                if epoch == 0:
                    killer.start()  # after the first epoch has quarantined the bad samples
                    gc.collect()
                    rss_after_first = rss()
                    incidents_after_first = len(loader.incidents)
                print(
                    f"  epoch {epoch}: {sum(delivered.values())} samples, "
                    f"{len(loader.incidents)} incidents, {killer.kills} kills",
                    flush=True,
                )
        except Exception as error:  # the promise: never a raise where healing can go on
            broken.append(f"raised {type(error).__name__}: {str(error).splitlines()[0]}")
        finally:
            killer.stopped.set()
            killer.join(timeout=10)
    gc.collect()
    report = loader.report.to_dict()
    if report["status"] not in ("healed", "ok"):
        broken.append(f"status {report['status']!r}, the ledger lost nothing")
    if report["delivered"]["samples"] != samples:
        broken.append(
            f"report counts {report['delivered']['samples']} samples, the ledger {samples}"
        )
    incidents = len(loader.incidents) - incidents_after_first
    growth = rss() - (rss_after_first or rss())
    backoff = loader.report.backoff
    pool = (backoff[-1].num_workers if backoff else args.workers, args.workers)
    return {
        "persistent": persistent,
        "epochs": epochs,
        "samples": samples,
        "kills": killer.kills,
        "incidents": len(loader.incidents),
        "quarantined": len(report["quarantine"]),
        "bad": len(bad),
        "status": report["status"],
        "pool_at_end": pool,
        "rss_growth_per_incident_kib": growth / max(incidents, 1) / 1024,
        "seconds": time.monotonic() - started,
        "broken": broken,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="both soaks together")
    parser.add_argument("--min-epochs", type=int, default=20, help="per soak, whatever the time")
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--sample-ms", type=float, default=1.0)
    parser.add_argument("--batch-size", type=int, default=20)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--kill-low", type=float, default=3.0, help="seconds between kills, least")
    parser.add_argument("--kill-high", type=float, default=5.0, help="seconds between kills, most")
    parser.add_argument("--seed", type=int, default=int.from_bytes(os.urandom(2), "big"))
    args = parser.parse_args()
    print(f"soak seed {args.seed}: python benchmarks/soak.py --seed {args.seed} ...", flush=True)
    failed = False
    for persistent in (False, True):
        print(f"persistent_workers={persistent}:", flush=True)
        result = soak(args, persistent, args.minutes * 60 / 2)
        failed |= bool(result["broken"])
        print(
            f"persistent_workers={persistent}: {result['epochs']} epochs, {result['samples']} "
            f"samples, {result['kills']} kills, {result['incidents']} incidents, "
            f"{result['quarantined']} quarantined of {result['bad']} bad, status "
            f"{result['status']}, pool {result['pool_at_end'][0]} of {result['pool_at_end'][1]} "
            f"workers at the end, main RSS +{result['rss_growth_per_incident_kib']:.1f} KiB per "
            f"incident, {result['seconds']:.0f} s"
        )
        for line in result["broken"]:
            print(f"  BROKEN: {line}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
