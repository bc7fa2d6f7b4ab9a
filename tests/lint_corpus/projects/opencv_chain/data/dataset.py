from torch.utils.data import Dataset

from utils.boxes import prepare


class Detection(Dataset):
    def __init__(self, records):
        self.paths = [r for r in records]

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, index):
        return self.load(index)

    def load(self, index):
        return prepare(self.paths[index])
