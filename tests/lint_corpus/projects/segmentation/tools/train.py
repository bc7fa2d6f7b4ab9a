import argparse

import torch
from torch.utils.data import DataLoader

from seg.data.voc import VocSeg
from seg.utils.env import worker_init_fn

parser = argparse.ArgumentParser()
parser.add_argument("--workers", type=int, default=4)
args = parser.parse_args()

train_loader = DataLoader(
    VocSeg("data/voc"), batch_size=8, num_workers=args.workers, worker_init_fn=worker_init_fn
)
model = torch.nn.Conv2d(3, 21, 1)


def train_one_epoch(epoch):
    for images in train_loader:
        model(images)


for epoch in range(30):
    train_one_epoch(epoch)
