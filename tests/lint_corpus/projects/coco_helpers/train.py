from torch.utils.data import DataLoader

from datasets.coco import CocoBoxes, CocoSizes


def main():
    for dataset in (CocoBoxes("train.json"), CocoSizes("train.json")):
        for batch in DataLoader(dataset, num_workers=8):
            pass


if __name__ == "__main__":
    main()
