# expect: LD102
# ruff: noqa
# A transform held in a variable, passed to a Dataset that keeps it in self.transform, with
# num_workers from a config: possibly > 0.
from torch.utils.data import DataLoader, Dataset
from torchvision import transforms

scale = transforms.Lambda(lambda x: x * 2)


class Numbers(Dataset):
    def __init__(self, values, transform=None):
        self.values = values
        self.transform = transform

    def __len__(self):
        return len(self.values)

    def __getitem__(self, index):
        return self.transform(self.values[index])


def main(cfg):
    dataset = Numbers(list(range(100)), transform=scale)
    return DataLoader(dataset, batch_size=8, num_workers=cfg.data.num_workers)
