import os
import pickle

import torch
from PIL import Image


class OxfordParisDataset(torch.utils.data.Dataset):
    def __init__(self, dir_main, dataset, split, transform=None):
        gnd_fname = os.path.join(dir_main, dataset, f"gnd_{dataset}.pkl")
        with open(gnd_fname, "rb") as f:
            cfg = pickle.load(f)
        cfg["dir_images"] = os.path.join(dir_main, dataset, "jpg")
        self.cfg = cfg  # want: LD107
        self.samples = cfg["qimlist"] if split == "query" else cfg["imlist"]
        self.transform = transform

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, index):
        path = os.path.join(self.cfg["dir_images"], self.samples[index] + ".jpg")
        return Image.open(path)


if __name__ == "__main__":
    args = parse_args()
    dataset_train = OxfordParisDataset(args.data_path, args.dataset, split="train")
    data_loader_train = torch.utils.data.DataLoader(
        dataset_train, batch_size=1, num_workers=args.num_workers, drop_last=False
    )
    for samples in data_loader_train:
        extract(samples)
