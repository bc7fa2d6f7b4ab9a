import torch
from torch.utils.data import DataLoader

from meldataset import MelDataset, get_dataset_filelist


def train(rank, a, h):
    device = torch.device(f"cuda:{rank:d}")
    training_filelist = get_dataset_filelist(a)
    trainset = MelDataset(training_filelist, h.segment_size, device=device)
    train_loader = DataLoader(trainset, num_workers=h.num_workers, shuffle=False, batch_size=h.batch_size)
    for batch in train_loader:
        step(batch)


if __name__ == "__main__":
    train(0, parse_args(), load_config())
