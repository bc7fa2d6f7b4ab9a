"""timm's own loading: ``ImageDataset`` over a folder of PNGs (``ARGV[1]``: one class folder per
image, so that a sample's target is its index), ``create_loader`` with ``is_training=True``
(``drop_last=True``) and, with ``ARGV[2] == "multi-epochs"``, its ``MultiEpochsDataLoader``."""

from __future__ import annotations

import sys

import torch
from eco_plan import fault, record
from timm.data import ImageDataset, create_loader


def planted(target: int) -> int:
    fault(target)  # timm's reader skips an unreadable image by itself: plant after it
    return target


def main() -> None:
    dataset = ImageDataset(sys.argv[1], target_transform=planted)
    loader = create_loader(
        dataset,
        input_size=(3, 8, 8),
        batch_size=8,
        is_training=True,
        use_prefetcher=False,
        num_workers=2,
        device=torch.device("cpu"),
        use_multi_epochs_loader=sys.argv[2] == "multi-epochs",
    )
    model = torch.nn.Linear(3 * 8 * 8, 1)
    for images, targets in loader:
        record(targets)
        model(images.reshape(len(targets), -1)).mean().backward()


if __name__ == "__main__":
    main()
