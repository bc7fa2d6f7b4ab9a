"""Scan throughput beside a bare process pool and a stock DataLoader pass over the same dataset.

Three passes fetch every sample of one dataset with the same number of worker processes:

- bare: ``multiprocessing.Pool(n).imap_unordered(fetch, range(N), chunksize=...)`` with the chunk
  size ``Pool.map`` itself would choose (``N / (4 n)``). It is measured twice: returning each
  sample (``dataset.__getitem__`` itself: a tensor then goes through torch's shared-memory
  reductions, one file per sample) and dropping it in the worker (nothing but the fetch: the
  machine's limit, which ``ratio scan/bare`` compares with);
- stock: ``torch.utils.data.DataLoader(batch_size=None)``, one sample per message;
- scan: ``scan_dataset``, every sample isolated (a crash, an OOM kill or a hang names it).

Rounds rotate which pass runs first; ratios are medians of per-round ratios, so that drift from
other processes on the cores cancels. Beside the rates, the CPU seconds per sample of each pass
(the parent's and its children's, from ``getrusage``) show the cost of each pass on its own: a
loaded machine slows the wall clock of every pass but not the work each does.

    python benchmarks/scan.py [--repeats 5] [--workers 2] [--samples 1500] [--workload decode]
    python benchmarks/scan.py --workload sleep --workers 1 2 4 8   # more workers than cores

``--workload sleep`` (1 ms of sleep and almost no CPU per sample) simulates more cores than this
machine has: its workers wait rather than compute, so what limits a pass is its own per-sample
cost in the parent.

Target: ratio scan/bare >= 0.8 (scan >= 0.90x the stock pass).

``--ray``: the local scan beside ``scan --ray`` on a Ray started here (all of this machine's CPUs,
connected once, its workers warmed up by a first pass): the same dataset (the Ray tasks load it
from this file's ``ray_dataset``), the same workers per shard, rotating rounds. It prints the ratio
ray/local and the Ray scan's samples/s per CPU of the cluster. Target: ratio ray/local >= 0.8.

    python benchmarks/scan.py --ray [--workers 1 2] [--samples 3000]
"""

from __future__ import annotations

import argparse
import io
import multiprocessing
import os
import resource
import statistics
import time
import warnings
from collections.abc import Callable

import torch
from torch.utils.data import Dataset

from loaderdoctor.scan import scan_dataset


class Decode(Dataset):
    """A distinct JPEG per sample, decoded and converted to a uint8 CHW tensor on every fetch."""

    def __init__(self, n: int, side: int = 288) -> None:
        from PIL import Image

        self.n = n
        self.jpegs: list[bytes] = []
        generator = torch.Generator().manual_seed(0)
        for _ in range(min(n, 64)):  # 64 distinct images, reused: the decode work is the same
            pixels = torch.randint(0, 256, (side // 8, side // 8, 3), generator=generator)
            image = Image.fromarray(pixels.to(torch.uint8).numpy()).resize((side, side))
            buffer = io.BytesIO()
            image.save(buffer, format="JPEG", quality=90)
            self.jpegs.append(buffer.getvalue())

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> torch.Tensor:
        from PIL import Image

        with Image.open(io.BytesIO(self.jpegs[index % len(self.jpegs)])) as image:
            pixels = torch.frombuffer(bytearray(image.convert("RGB").tobytes()), dtype=torch.uint8)
        return pixels.view(image.height, image.width, 3).permute(2, 0, 1)


class Work(Dataset):
    """About 1 ms of real compute per sample (matrix-vector products), returns a small tensor."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.weights = torch.randn(96, 96)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> torch.Tensor:
        x = torch.full((96,), float(index))
        for _ in range(60):
            x = torch.tanh(self.weights @ x)
        return x


class Sleep(Dataset):
    """1 ms of waiting (a remote read) and almost no CPU: workers beyond the cores still scale."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> torch.Tensor:
        time.sleep(0.001)
        return torch.full((16,), float(index))


_POOL_DATASET: Dataset | None = None  # the dataset a forked pool worker fetches from


def _fetch_and_drop(index: int) -> None:
    assert _POOL_DATASET is not None
    _POOL_DATASET[index]


def cpu_seconds() -> float:
    """CPU time of this process and of its children that ended (workers are joined by then)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def bare_pass(dataset: Dataset, workers: int, keep: bool) -> None:
    global _POOL_DATASET
    _POOL_DATASET = dataset
    samples = len(dataset)  # type: ignore[arg-type]
    chunksize = max(1, -(-samples // (4 * workers)))  # what Pool.map chooses
    fetch = dataset.__getitem__ if keep else _fetch_and_drop
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        for _sample in pool.imap_unordered(fetch, range(samples), chunksize=chunksize):
            pass


def stock_pass(dataset: Dataset, workers: int) -> None:
    for _sample in torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=workers):
        pass


def scan_pass(dataset: Dataset, workers: int) -> None:
    report = scan_dataset(dataset, num_workers=workers)
    assert not report.bad, report.bad


PASSES: dict[str, Callable[[Dataset, int], None]] = {
    "bare pool, samples dropped in the worker": lambda d, w: bare_pass(d, w, keep=False),
    "bare pool, samples returned": lambda d, w: bare_pass(d, w, keep=True),
    "stock DataLoader pass": stock_pass,
    "loaderdoctor scan": scan_pass,
}
BARE, BARE_KEEP, STOCK, SCAN = PASSES


def timed(
    run: Callable[[Dataset, int], None], dataset: Dataset, workers: int
) -> tuple[float, float]:
    """(samples/s, CPU ms per sample) of one pass."""
    cpu, started = cpu_seconds(), time.perf_counter()
    run(dataset, workers)
    wall, cpu = time.perf_counter() - started, cpu_seconds() - cpu
    samples = len(dataset)  # type: ignore[arg-type]
    return samples / wall, cpu * 1000 / samples


def compare(dataset: Dataset, workers: int, repeats: int) -> None:
    names = list(PASSES)
    rates: dict[str, list[float]] = {name: [] for name in names}
    costs: dict[str, list[float]] = {name: [] for name in names}
    for round_number in range(repeats):
        shift = round_number % len(names)
        order = names[shift:] + names[:shift]
        if round_number % 2:
            order.reverse()
        for name in order:
            rate, cost = timed(PASSES[name], dataset, workers)
            rates[name].append(rate)
            costs[name].append(cost)
    samples = len(dataset)  # type: ignore[arg-type]
    print(f"{workers} workers, {samples} samples, {repeats} rotating rounds")
    for name in names:
        print(
            f"  {name + ':':<42} median {statistics.median(rates[name]):>6.0f} samples/s, "
            f"{statistics.median(costs[name]):.3f} CPU ms per sample"
        )
    for label, other in (("bare", BARE), ("bare-returned", BARE_KEEP), ("stock", STOCK)):
        ratios = [s / o for s, o in zip(rates[SCAN], rates[other])]
        print(
            f"ratio scan/{label}: median {statistics.median(ratios):.3f} "
            f"(min {min(ratios):.3f}, max {max(ratios):.3f})"
        )
    extra = [s - b for s, b in zip(costs[SCAN], costs[BARE])]
    print(
        f"scan's CPU cost per sample beyond the bare pool: median {statistics.median(extra):.3f} ms"
    )


WORKLOAD_ENV, SAMPLES_ENV = "LOADERDOCTOR_BENCH_WORKLOAD", "LOADERDOCTOR_BENCH_SAMPLES"


def ray_dataset() -> Dataset:
    """The dataset of a Ray pass: what the Ray tasks load (a local Ray inherits the env)."""
    kinds = {"decode": Decode, "compute": Work, "sleep": Sleep}
    return kinds[os.environ[WORKLOAD_ENV]](int(os.environ[SAMPLES_ENV]))


def ray_pass(dataset: Dataset, workers: int) -> None:
    from loaderdoctor.scan.cluster import RayScan, scan_on_ray
    from loaderdoctor.scan.job import load

    options = RayScan(None, f"{os.path.abspath(__file__)}:ray_dataset", load, os.getcwd(), workers)
    report = scan_on_ray(dataset, options, spec="bench")
    assert not report.bad, report.bad


def compare_ray(dataset: Dataset, workers: int, repeats: int) -> None:
    import ray

    cpus = int(ray.cluster_resources().get("CPU", 1))
    ray_pass(dataset, workers)  # warm-up: Ray's worker processes start and import torch
    rates: dict[str, list[float]] = {"local": [], "ray": []}
    passes = {"local": scan_pass, "ray": ray_pass}
    for round_number in range(repeats):
        for name in ("local", "ray") if round_number % 2 == 0 else ("ray", "local"):
            rates[name].append(timed(passes[name], dataset, workers)[0])
    ratios = [r / loc for r, loc in zip(rates["ray"], rates["local"])]
    local, remote = statistics.median(rates["local"]), statistics.median(rates["ray"])
    print(f"{workers} workers per shard, {len(dataset)} samples, {repeats} rounds, {cpus} CPUs")  # type: ignore[arg-type]
    print(f"  local scan: median {local:.0f} samples/s")
    print(f"  ray scan:   median {remote:.0f} samples/s, {remote / cpus:.0f} samples/s per CPU")
    print(
        f"ratio ray/local: median {statistics.median(ratios):.3f} "
        f"(min {min(ratios):.3f}, max {max(ratios):.3f})"
    )


def load() -> str:
    try:
        with open("/proc/pressure/cpu") as handle:
            pressure = handle.readline().strip()
    except OSError:
        pressure = "CPU pressure not readable"
    return f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; {pressure}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--workers", type=int, nargs="+", default=[2])
    parser.add_argument("--samples", type=int, default=1500)
    parser.add_argument("--workload", choices=("decode", "compute", "sleep"), default="decode")
    parser.add_argument("--ray", action="store_true", help="the local scan beside scan --ray")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    kinds = {"decode": Decode, "compute": Work, "sleep": Sleep}
    dataset = kinds[args.workload](args.samples)
    started = time.perf_counter()
    for index in range(100):
        dataset[index]
    print(
        f"{args.workload}: {(time.perf_counter() - started) * 10:.2f} ms per sample in the main process"
    )
    print(f"before: {load()}")
    if args.ray:
        start_local_ray(args.workload, args.samples)
    for workers in args.workers:
        stock_pass(dataset, workers)  # warm-up
        if args.ray:
            compare_ray(dataset, workers, args.repeats)
        else:
            compare(dataset, workers, args.repeats)
    print(f"after: {load()}")


def start_local_ray(workload: str, samples: int) -> None:
    import logging

    import ray

    os.environ.update({WORKLOAD_ENV: workload, SAMPLES_ENV: str(samples)})
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # else ray.init writes ~/.ray/auth_token
    from loaderdoctor.scan.cluster import LOCAL_RAY

    # as `scan --ray` starts it, kept for every pass
    ray.init(logging_level=logging.ERROR, log_to_driver=False, **LOCAL_RAY)


if __name__ == "__main__":
    main()
