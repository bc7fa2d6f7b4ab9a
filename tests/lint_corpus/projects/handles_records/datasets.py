import multiprocessing
import zipfile

import numpy as np
import torch
from torch.utils.data import Dataset

from records import load_items, load_records, row_views


class ZipImages(Dataset):
    def __init__(self, archive):
        self.path = archive
        self.archive = zipfile.ZipFile(archive)
        self.names = sorted(self.archive.namelist())

    def __len__(self):
        return len(self.names)

    def __getitem__(self, index):
        return np.frombuffer(self.opened().read(self.names[index]), dtype=np.uint8)

    def opened(self):
        if self.archive is None:
            self.archive = zipfile.ZipFile(self.path)
        return self.archive

    def close(self):
        if self.archive is not None:
            self.archive.close()
            self.archive = None


class ZipImagesClosed(ZipImages):
    def __init__(self, archive):
        super().__init__(archive)
        self.close()


class SharedCache(Dataset):
    def __init__(self, size):
        self.manager = multiprocessing.Manager()
        self.cache = self.manager.dict()
        self.size = size

    def __len__(self):
        return self.size

    def __getitem__(self, index):
        if index not in self.cache:
            self.cache[index] = np.zeros(16)
        return self.cache[index]


class CsvBoxes(Dataset):
    def __init__(self, path):
        self.records = load_records(path)

    def __len__(self):
        return len(self.records)

    def __getitem__(self, index):
        record = self.records[index]
        return record["image"], np.array(record["boxes"], dtype=np.float32)


class JsonItems(Dataset):
    def __init__(self, path, split="train"):
        self.items = load_items(path, split)

    def __len__(self):
        return len(self.items)

    def __getitem__(self, index):
        return self.items[index]


class Rows(Dataset):
    def __init__(self, path):
        self.rows = row_views(path)

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, index):
        return self.rows[index]


class Attributes(Dataset):
    def __init__(self, attr_path):
        self.train = []
        self.test = []
        self.preprocess(attr_path)

    def preprocess(self, attr_path):
        lines = [line.rstrip() for line in open(attr_path)]
        for i, line in enumerate(lines[2:]):
            name, *values = line.split()
            labels = [value == "1" for value in values]
            if i < 2000:
                self.test.append([name, labels])
            else:
                self.train.append([name, labels])

    def __len__(self):
        return len(self.train)

    def __getitem__(self, index):
        return self.train[index]


class BoxList(Dataset):
    def __init__(self, list_file):
        self.names, self.boxes, self.labels = [], [], []
        with open(list_file) as handle:
            lines = handle.readlines()
        for line in lines:
            fields = line.split()
            self.names.append(fields[0])
            box, label = [], []
            for i in range((len(fields) - 1) // 5):
                box.append([float(v) for v in fields[1 + 5 * i : 5 + 5 * i]])
                label.append(int(fields[5 + 5 * i]))
            self.boxes.append(torch.Tensor(box))
            self.labels.append(torch.LongTensor(label))

    def __len__(self):
        return len(self.names)

    def __getitem__(self, index):
        return self.names[index], self.boxes[index], self.labels[index]


class Captions(Dataset):
    def __init__(self, captions, vocab):
        self.captions = captions
        self.vocab = vocab

    def __len__(self):
        return len(self.captions)

    def __getitem__(self, index):
        words = self.captions[index].split()
        return torch.tensor([self.vocab.get(word, 0) for word in words])
