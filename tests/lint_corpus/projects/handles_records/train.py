import pickle
import sys

from torch.utils.data import DataLoader

from datasets import (
    Attributes,
    BoxList,
    CsvBoxes,
    JsonItems,
    Rows,
    SharedCache,
    ZipImages,
    ZipImagesClosed,
)
from loaders import get_loader


def main(root):
    for dataset in (
        ZipImages(f"{root}/images.zip"),
        ZipImagesClosed(f"{root}/images.zip"),
        SharedCache(100),
        CsvBoxes(f"{root}/boxes.csv"),
        JsonItems(f"{root}/items.json"),
        Rows(f"{root}/rows.npy"),
        Attributes(f"{root}/attributes.txt"),
        BoxList(f"{root}/boxes.txt"),
    ):
        for batch in DataLoader(dataset, batch_size=4, num_workers=4):
            print(batch)
    with open(f"{root}/vocab.pkl", "rb") as handle:
        vocab = pickle.load(handle)
    for batch in get_loader(["a b"], vocab, batch_size=2, num_workers=2):
        print(batch)


if __name__ == "__main__":
    main(sys.argv[1])
