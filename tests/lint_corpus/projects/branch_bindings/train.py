import argparse

from torch.utils.data import DataLoader

from datasets import EagerVolumes, LazyVolumes, Slices


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--debug", action="store_true")
    parser.add_argument("--augment", action="store_true")
    parser.add_argument("path")
    args = parser.parse_args()

    if args.debug:
        dataset = EagerVolumes(args.path)
        loader = DataLoader(dataset, batch_size=1, num_workers=0)
    else:
        dataset = LazyVolumes(args.path)
        loader = DataLoader(dataset, batch_size=4, num_workers=8)
    for volume in loader:
        volume.mean()

    if args.augment:
        slices = Slices(LazyVolumes(args.path), transform=lambda volume: volume[:, ::-1])
    else:
        slices = Slices(LazyVolumes(args.path))
    for item in DataLoader(slices, batch_size=4, num_workers=8):
        item.sum()


if __name__ == "__main__":
    main()
