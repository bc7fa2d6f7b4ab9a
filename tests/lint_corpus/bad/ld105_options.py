# expect: LD105 LD105 LD105 LD105
# ruff: noqa
import argparse

from torch.utils.data import DataLoader

parser = argparse.ArgumentParser()
parser.add_argument("--num-workers", type=int, default=0)
args = parser.parse_args()


def loaders(train_set, val_set):
    train = DataLoader(
        train_set,
        batch_size=64,
        num_workers=args.num_workers,
        persistent_workers=True,
        prefetch_factor=4,
    )
    val = DataLoader(val_set, batch_size=64, timeout=30)
    test = DataLoader(val_set, batch_size=64, num_workers=0, pin_memory=True, prefetch_factor=2)
    return train, val, test
