# expect: LD102
# ruff: noqa
# A Compose([... Lambda(lambda ...)]) given to ImageFolder, workers from the command line.
import argparse

from torch.utils.data import DataLoader
from torchvision import datasets, transforms


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=4)
    args = parser.parse_args()
    augment = transforms.Compose(
        [transforms.ToTensor(), transforms.Lambda(lambda t: t.flip(0))]
    )
    folder = datasets.ImageFolder("data/train", transform=augment)
    for images, labels in DataLoader(folder, batch_size=32, num_workers=args.workers):
        pass


if __name__ == "__main__":
    main()
