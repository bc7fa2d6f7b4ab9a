import argparse

import setup_env  # noqa: F401  (cv2 threads)
import torch
from datasets import CocoBoxes
from torch.utils.data import DataLoader


def collate(batch):
    return batch


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", default="data/coco")
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=12)
    args = parser.parse_args()
    dataset = CocoBoxes(args.root, f"{args.root}/train.json", f"{args.root}/features.h5")
    loader = DataLoader(
        dataset, batch_size=16, shuffle=True, num_workers=args.workers, collate_fn=collate
    )
    model = torch.nn.Linear(4, 4)
    for epoch in range(args.epochs):
        for batch in loader:
            model(torch.zeros(4))


if __name__ == "__main__":
    main()
