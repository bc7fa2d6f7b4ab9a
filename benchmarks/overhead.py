"""Throughput of loaderdoctor.DataLoader against stock torch.utils.data.DataLoader, side by side.

Both loaders run in this one process, interleaved (stock, supervised, stock, ...) so that machine
noise hits both alike; the figure is the ratio of median throughputs (supervised / stock).

    python benchmarks/overhead.py [--repeats 7] [--workers 2] [--hang-timeout S] [--stateful]

With ``--stateful`` the pair is torchdata's ``StatefulDataLoader`` and
``loaderdoctor.StatefulDataLoader`` (map-style rows only: a stream runs as plain torchdata).

With ``--hang-timeout`` the supervised loader runs its hang watchdog. Run it with
``tests/fixtures/portable`` on PYTHONPATH to measure the watchdog of a platform without a dump
signal (Windows: a thread in each worker re-arms faulthandler's timer per stage).

Targets: >= 0.98x on decode-heavy samples (~1 ms of real work each), >= 0.90x on tiny
samples.
"""

from __future__ import annotations

import argparse
import io
import statistics
import time
from collections.abc import Callable

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset

import loaderdoctor


class DecodeDataset(Dataset):
    """Decodes a real JPEG per sample (about 1 ms of work on this machine's cores)."""

    def __init__(self, n: int, side: int) -> None:
        rng = np.random.default_rng(0)
        pixels = rng.integers(0, 255, (side, side, 3), dtype=np.uint8)
        buffer = io.BytesIO()
        Image.fromarray(pixels).save(buffer, format="JPEG", quality=90)
        self.blob = buffer.getvalue()
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> torch.Tensor:
        image = Image.open(io.BytesIO(self.blob))
        image.load()
        return torch.from_numpy(np.asarray(image)).permute(2, 0, 1).float().mean((1, 2))


class TinyDataset(Dataset):
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> int:
        return index


class TinyStream(torch.utils.data.IterableDataset):
    """A stream of ints, each worker its share by get_worker_info(): what a stream's supervision
    costs (positions, keys and the batch wrapper of a stream) on the cheapest items there are."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self):  # type: ignore[no-untyped-def]
        info = torch.utils.data.get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        return iter(range(worker, self.n, workers))


def time_epoch(factory: Callable[[], torch.utils.data.DataLoader]) -> tuple[float, float]:
    """(samples/s over a whole epoch including worker start-up, samples/s after the first batch)."""
    loader = factory()
    started = time.perf_counter()
    first = None
    samples = 0
    for batch in loader:
        samples += len(batch)
        if first is None:
            first = time.perf_counter()
            first_samples = samples
    ended = time.perf_counter()
    assert first is not None
    steady = (samples - first_samples) / (ended - first)
    return samples / (ended - started), steady


def measure(
    name: str,
    dataset: Dataset,
    batch_size: int,
    workers: int,
    repeats: int,
    hang_timeout: float | None = None,
    pair: tuple[type, type] = (torch.utils.data.DataLoader, loaderdoctor.DataLoader),
) -> dict:
    shuffle = not isinstance(dataset, torch.utils.data.IterableDataset)

    def factory(cls: type, **extra: object) -> Callable[[], torch.utils.data.DataLoader]:
        return lambda: cls(
            dataset, batch_size=batch_size, num_workers=workers, shuffle=shuffle, **extra
        )

    stock = factory(pair[0])
    watchdog = {"hang_timeout": hang_timeout} if hang_timeout else {}
    supervised = factory(pair[1], **watchdog)
    time_epoch(stock)  # warm-up: imports, page cache
    time_epoch(supervised)
    # Each round runs stock, supervised and a second stock epoch (the A/A control that shows the
    # noise floor), in an order that rotates so no variant always runs first.
    runs: dict[str, list[tuple[float, float]]] = {"stock": [], "supervised": [], "control": []}
    order = [("stock", stock), ("supervised", supervised), ("control", stock)]
    for round_number in range(repeats):
        shift = round_number % len(order)
        for key, loader_factory in order[shift:] + order[:shift]:
            runs[key].append(time_epoch(loader_factory))
    row: dict = {"workload": name}
    for column, position in (("epoch", 0), ("steady", 1)):
        for variant in ("supervised", "control"):
            # Pair ratios: both epochs of a round ran under the same machine state.
            pairs = sorted(v[position] / s[position] for v, s in zip(runs[variant], runs["stock"]))
            row[f"{column}_{variant}_ratio"] = statistics.median(pairs)
            row[f"{column}_{variant}_iqr"] = (pairs[len(pairs) // 4], pairs[3 * len(pairs) // 4])
        row[f"{column}_stock"] = statistics.median(r[position] for r in runs["stock"])
        row[f"{column}_supervised"] = statistics.median(r[position] for r in runs["supervised"])
    return row


def per_sample_ms(dataset: Dataset, n: int = 200) -> float:
    started = time.perf_counter()
    for index in range(n):
        dataset[index]
    return (time.perf_counter() - started) / n * 1000


def detector_costs(repeats: int = 2000) -> dict[str, float]:
    """µs of each silent-data detector's step, alone: what a supervised loader adds per batch
    (inside the first batches of an epoch that are looked at, and after them), per epoch start
    and per worker start. The epoch figures above include them."""
    from loaderdoctor.supervise.detectors import DataWatch
    from loaderdoctor.supervise.worker import rng_states

    def per_call(step: Callable[[], object], n: int = repeats) -> float:
        started = time.perf_counter()
        for _ in range(n):
            step()
        return (time.perf_counter() - started) / n * 1e6

    images = torch.rand(32, 3, 224, 224)
    stream = loaderdoctor.DataLoader(TinyStream(64), batch_size=32, num_workers=4)
    shuffled = loaderdoctor.DataLoader(TinyDataset(64), batch_size=32, shuffle=True)
    indices = list(range(32))
    watch = DataWatch(stream.dataset, lambda: stream)
    shuffle_watch = DataWatch(shuffled.dataset, lambda: shuffled)
    shuffle_watch.epoch_started(0)

    def stream_batch() -> None:
        watch.epoch_started(0)  # re-opens the window: every call fingerprints
        watch.delivered(None, images)

    def shuffled_batch() -> None:
        shuffle_watch._watching = 8  # inside the window: the indices are kept
        shuffle_watch.delivered(indices, images)
        shuffle_watch._order.clear()

    decode = DecodeDataset(n=8, side=32)
    after = DataWatch(stream.dataset, lambda: stream)
    return {
        "stream batch in the window (32x3x224x224 fingerprint)": per_call(stream_batch),
        "shuffled batch in the window (32 indices)": per_call(shuffled_batch),
        "batch after the window": per_call(lambda: after.delivered(None, images), 100_000),
        "epoch start (attributes of a dataset)": per_call(lambda: shuffle_watch.epoch_started(1)),
        "worker start (random states, in each worker)": per_call(
            lambda: rng_states.event(decode), 200
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=11)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--hang-timeout", type=float, default=None)
    parser.add_argument(
        "--stateful",
        action="store_true",
        help="torchdata's StatefulDataLoader against loaderdoctor.StatefulDataLoader",
    )
    args = parser.parse_args()
    pair = (torch.utils.data.DataLoader, loaderdoctor.DataLoader)
    if args.stateful:
        from torchdata.stateful_dataloader import StatefulDataLoader

        pair = (StatefulDataLoader, loaderdoctor.StatefulDataLoader)
    torch.set_num_threads(1)

    decode = DecodeDataset(n=2048, side=224)
    tiny = TinyDataset(n=60_000)
    print(f"decode-heavy sample: {per_sample_ms(decode):.2f} ms of work in the main process")
    print(f"tiny sample: {per_sample_ms(tiny) * 1000:.1f} µs")
    common = (args.workers, args.repeats, args.hang_timeout, pair)
    rows = [
        measure("decode-heavy (~1 ms)", decode, 32, *common),
        measure("tiny", tiny, 64, *common),
    ]
    if not args.stateful:
        rows.append(measure("tiny stream", TinyStream(60_000), 64, *common))
    print(
        f"\n{args.workers} workers, {args.repeats} rounds; ratio = median of per-round "
        "supervised/stock throughput; control = stock/stock (the noise floor)"
    )
    print(
        f"{'workload':<22}{'stock/s':>9}{'superv./s':>11}{'ratio':>8}{'IQR':>14}"
        f"{'steady':>8}{'control':>9}{'ctl IQR':>14}"
    )
    for row in rows:
        low, high = row["epoch_supervised_iqr"]
        c_low, c_high = row["epoch_control_iqr"]
        print(
            f"{row['workload']:<22}{row['epoch_stock']:>9.0f}{row['epoch_supervised']:>11.0f}"
            f"{row['epoch_supervised_ratio']:>8.3f}{f'{low:.3f}-{high:.3f}':>14}"
            f"{row['steady_supervised_ratio']:>8.3f}{row['epoch_control_ratio']:>9.3f}"
            f"{f'{c_low:.3f}-{c_high:.3f}':>14}"
        )

    print("\nsilent-data detectors, each step alone:")
    for step, micros in detector_costs().items():
        print(f"  {step:<56}{micros:>9.1f} µs")


if __name__ == "__main__":
    main()
