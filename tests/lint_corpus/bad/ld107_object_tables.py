# expect: LD107 LD107
# ruff: noqa
import csv
import json
import os

from torch.utils.data import Dataset


class JsonLines(Dataset):
    def __init__(self, path):
        with open(path) as handle:
            self.records = [json.loads(line) for line in handle]

    def __len__(self):
        return len(self.records)

    def __getitem__(self, index):
        return self.records[index]["text"]


# File names and labels from a listing: only an `info` finding (hidden by default).
class FolderOfImages(Dataset):
    def __init__(self, root):
        self.samples = []
        for label, name in enumerate(sorted(os.listdir(root))):
            for file_name in os.listdir(os.path.join(root, name)):
                self.samples.append((os.path.join(root, name, file_name), label))

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, index):
        path, label = self.samples[index]
        return path, label


class CsvTable(Dataset):
    def __init__(self, path):
        with open(path, newline="") as handle:
            self.rows = list(csv.DictReader(handle))

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, index):
        return self.rows[index]
