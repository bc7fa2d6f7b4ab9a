# expect: LD101
# ruff: noqa
import argparse

import torch
import torch.utils.data as tud

parser = argparse.ArgumentParser()
parser.add_argument("--workers", type=int, default=2)
parser.add_argument("--epochs", type=int, default=1)


def train(args):
    dataset = tud.TensorDataset(torch.randn(32, 4))
    loader = tud.DataLoader(dataset, batch_size=4, num_workers=args.workers)
    for _epoch in range(args.epochs):
        for (batch,) in loader:
            batch.sum()


def main():
    args = parser.parse_args()
    train(args)


main()
