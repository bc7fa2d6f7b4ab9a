# expect: LD112
# ruff: noqa
import json

import torch
from torch.utils.data import DataLoader, IterableDataset


class JsonLines(IterableDataset):
    def __init__(self, paths):
        self.paths = paths

    def __iter__(self):
        for path in self.paths:
            with open(path) as lines:
                for line in lines:
                    yield json.loads(line)


def main():
    loader = DataLoader(JsonLines(["a.jsonl", "b.jsonl"]), batch_size=8, num_workers=4)
    for batch in loader:
        print(batch)


if __name__ == "__main__":
    main()
