"""A MONAI pipeline: ``monai.data.Dataset`` over dict items whose values are PNG paths, read by
``LoadImaged`` (PIL). ``ARGV[1]`` is the folder of images (the test writes them; the culprit of
the "raise" fault is a truncated PNG, which MONAI wraps in its own RuntimeError)."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from eco_plan import SAMPLES, fault, record
from monai.data import DataLoader, Dataset
from monai.transforms import Compose, Lambdad, LoadImaged


def planted(index: int) -> int:
    fault(index)  # the "raise" culprit never gets here: its truncated PNG fails LoadImaged first
    return index


def main() -> None:
    folder = Path(sys.argv[1])
    data = [{"image": str(folder / f"{i:04d}.png"), "idx": i} for i in range(SAMPLES)]
    transform = Compose([LoadImaged(keys="image", image_only=True), Lambdad("idx", planted)])
    loader = DataLoader(Dataset(data, transform), batch_size=8, num_workers=2)
    model = torch.nn.Linear(16, 1)
    for batch in loader:
        record(batch["idx"])
        model(batch["image"][:, :4, :4].reshape(len(batch["idx"]), -1).float()).mean().backward()


if __name__ == "__main__":
    main()
