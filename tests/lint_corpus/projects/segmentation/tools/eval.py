from torch.utils.data import DataLoader

from seg.data.debug import DebugSeg


def main():
    for batch in DataLoader(DebugSeg("debug.bin"), batch_size=2):
        print(batch)


if __name__ == "__main__":
    main()
