import sys

from torch.utils.data import DataLoader

from datasets import Attributes, CsvBoxes, JsonItems, Rows, SharedCache, ZipImages, ZipImagesClosed


def main(root):
    for dataset in (
        ZipImages(f"{root}/images.zip"),
        ZipImagesClosed(f"{root}/images.zip"),
        SharedCache(100),
        CsvBoxes(f"{root}/boxes.csv"),
        JsonItems(f"{root}/items.json"),
        Rows(f"{root}/rows.npy"),
        Attributes(f"{root}/attributes.txt"),
    ):
        for batch in DataLoader(dataset, batch_size=4, num_workers=4):
            print(batch)


if __name__ == "__main__":
    main(sys.argv[1])
