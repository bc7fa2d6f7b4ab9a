"""Scan throughput against a stock DataLoader pass over the same dataset, side by side.

On a clean dataset with about 1 ms of real decode work per sample (a JPEG decoded by Pillow and
turned into a tensor, as an image dataset does), ``scan_dataset`` (every index through
the supervised, healing loader, one sample at a time) against a stock
``torch.utils.data.DataLoader(batch_size=None)`` pass that fetches the same samples with the same
workers. Rounds alternate which runs first; the ratio is the median of per-round ratios.

    python benchmarks/scan.py [--repeats 5] [--workers 2] [--samples 1500] [--workload decode]

Target (issue 7): scan >= 0.90x the stock pass.
"""

from __future__ import annotations

import argparse
import io
import statistics
import time
import warnings

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


def stock_pass(dataset: Dataset, workers: int) -> float:
    started = time.perf_counter()
    for _sample in torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=workers):
        pass
    return len(dataset) / (time.perf_counter() - started)  # type: ignore[arg-type]


def scan_pass(dataset: Dataset, workers: int) -> float:
    started = time.perf_counter()
    report = scan_dataset(dataset, num_workers=workers)
    assert not report.bad, report.bad
    return len(dataset) / (time.perf_counter() - started)  # type: ignore[arg-type]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--samples", type=int, default=1500)
    parser.add_argument("--workload", choices=("decode", "compute"), default="decode")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    dataset = Decode(args.samples) if args.workload == "decode" else Work(args.samples)
    started = time.perf_counter()
    for index in range(100):
        dataset[index]
    print(f"work per sample: {(time.perf_counter() - started) * 10:.2f} ms in the main process")
    stock_pass(dataset, args.workers)  # warm-up
    ratios, stock_rates, scan_rates = [], [], []
    for round_number in range(args.repeats):
        order = [("stock", stock_pass), ("scan", scan_pass)]
        if round_number % 2:
            order.reverse()
        rates = {name: run(dataset, args.workers) for name, run in order}
        stock_rates.append(rates["stock"])
        scan_rates.append(rates["scan"])
        ratios.append(rates["scan"] / rates["stock"])
    print(
        f"{args.workload}: {args.workers} workers, {args.samples} samples, "
        f"{args.repeats} alternating rounds"
    )
    print(f"stock DataLoader pass: median {statistics.median(stock_rates):.0f} samples/s")
    print(f"loaderdoctor scan:     median {statistics.median(scan_rates):.0f} samples/s")
    print(
        f"ratio scan/stock: median {statistics.median(ratios):.3f} "
        f"(min {min(ratios):.3f}, max {max(ratios):.3f})"
    )


if __name__ == "__main__":
    main()
