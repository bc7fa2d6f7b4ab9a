# expect: LD109 LD109
# ruff: noqa
# Generators kept one and two objects down: a transform in a Compose, a mask function a transform holds.
import numpy as np
from torch.utils.data import DataLoader, Dataset
from torchvision import transforms


class RandomJitter:
    def __init__(self, sigma, seed=0):
        self.sigma = sigma
        self.rng = np.random.RandomState(seed)

    def __call__(self, x):
        return x + self.rng.normal(0, self.sigma)


class MaskFunc:
    def __init__(self):
        self.rng = np.random.default_rng(0)

    def __call__(self, shape):
        return self.rng.uniform(size=shape)


class DataTransform:
    def __init__(self, mask_func):
        self.mask_func = mask_func

    def __call__(self, x):
        return self.mask_func(x.shape)


class Points(Dataset):
    def __init__(self, items, transform=None):
        self.items = items
        self.transform = transform

    def __getitem__(self, i):
        return self.transform(self.items[i])

    def __len__(self):
        return len(self.items)


def main():
    a = Points([1, 2], transform=transforms.Compose([RandomJitter(0.1)]))
    b = Points([1, 2], transform=DataTransform(MaskFunc()))
    for loader in (DataLoader(a, num_workers=2), DataLoader(b, num_workers=2)):
        for x in loader:
            pass


if __name__ == "__main__":
    main()
