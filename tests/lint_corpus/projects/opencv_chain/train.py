from torch.utils.data import DataLoader

from data.dataset import Detection


def main():
    for batch in DataLoader(Detection(["a.jpg"]), num_workers=4):
        pass


if __name__ == "__main__":
    main()
