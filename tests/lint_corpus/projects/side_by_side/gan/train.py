from torch.utils.data import DataLoader

from dataset import MultiResolution


def main():
    for batch in DataLoader(MultiResolution("data"), num_workers=2):
        pass


if __name__ == "__main__":
    main()
