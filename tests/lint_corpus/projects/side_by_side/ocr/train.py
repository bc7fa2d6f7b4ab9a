from torch.utils.data import DataLoader

import dataset


def main():
    for batch in DataLoader(dataset.LmdbText("data"), num_workers=2):
        pass


if __name__ == "__main__":
    main()
