"""How fast is ``loaderdoctor lint``? Generates ~10,000 lines of realistic training code.

Run: ``python benchmarks/lint_speed.py [--lines N]``. Prints lines/s and seconds (median of 3).
The target is under 2 s for 10,000 lines on one core.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from loaderdoctor.lint import check_paths

_TEMPLATE = '''\
"""Training script {index}: a dataset, a collate function, a model and a loop."""

import argparse
import json
import os

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

WORKERS_{index} = {workers}


class Records{index}(Dataset):
    def __init__(self, root, seed=0):
        self.root = root
        with open(os.path.join(root, "index.json")) as handle:
            self.records = [json.loads(line) for line in handle]
        self.rng = np.random.default_rng(seed)

    def __len__(self):
        return len(self.records)

    def _load(self, record):
        array = np.load(os.path.join(self.root, record["file"]))
        return torch.from_numpy(array).float()

    def __getitem__(self, index):
        record = self.records[index]
        sample = self._load(record)
        if self.rng.random() < 0.5:
            sample = sample.flip(-1)
        return sample, int(record["label"])


def collate_{index}(batch):
    samples, labels = zip(*batch)
    return torch.stack(samples), torch.tensor(labels)


class Model{index}(nn.Module):
    def __init__(self, width=128):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 10))

    def forward(self, inputs):
        return self.body(inputs.flatten(1))


def parse_args_{index}():
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", default="data")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--num-workers", type=int, default=4)
    return parser.parse_args()


def train_{index}(args):
    dataset = Records{index}(args.root)
    loader = DataLoader(
        dataset,
        batch_size=32,
        shuffle=True,
        num_workers=args.num_workers,
        collate_fn=collate_{index},
        persistent_workers=True,
    )
    model = Model{index}()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(args.epochs):
        total = 0.0
        for step, (inputs, labels) in enumerate(loader):
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(inputs), labels)
            loss.backward()
            optimizer.step()
            total += loss.item()
            if step % 50 == 0:
                print(epoch, step, total / (step + 1))
    debug = DataLoader(dataset, batch_size=4, num_workers=0, timeout=10)
    return model, debug


if __name__ == "__main__":
    train_{index}(parse_args_{index}())
'''


def generate(folder: Path, target_lines: int) -> int:
    lines, index = 0, 0
    while lines < target_lines:
        text = _TEMPLATE.format(index=index, workers=index % 5)
        (folder / f"train_{index:04d}.py").write_text(text)
        lines += text.count("\n")
        index += 1
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        lines = generate(Path(folder), options.lines)
        timings = []
        findings = 0
        for _ in range(options.repeat):
            start = time.perf_counter()
            report = check_paths([folder])
            timings.append(time.perf_counter() - start)
            findings = len(report.findings)
    median = statistics.median(timings)
    print(
        f"{lines} lines in {report.files_checked} files: median {median:.3f} s of "
        f"{options.repeat} runs, {lines / median:,.0f} lines/s ({findings} findings)"
    )


if __name__ == "__main__":
    main()
