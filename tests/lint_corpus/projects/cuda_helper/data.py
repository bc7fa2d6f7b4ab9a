from torch.utils.data import DataLoader, Dataset

from helpers import describe, to_tensor


class Points(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, index):
        return to_tensor([index])


class Labels(Dataset):
    """The twin: its helper only asks whether CUDA is there, which starts no context."""

    def __len__(self):
        return 8

    def __getitem__(self, index):
        return describe([index])


def main():
    for dataset in (Points(), Labels()):
        for batch in DataLoader(dataset, num_workers=2):
            pass
