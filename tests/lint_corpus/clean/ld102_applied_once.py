# expect:
# A lambda the Dataset only calls in __init__ (never kept), a module-level function kept, and
# lambdas with num_workers=0.
from torch.utils.data import DataLoader, Dataset


def double(x):
    return 2 * x


class Prepared(Dataset):
    def __init__(self, values, prepare, transform):
        self.values = [prepare(value) for value in values]
        self.transform = transform

    def __len__(self):
        return len(self.values)

    def __getitem__(self, index):
        return self.transform(self.values[index])


def main(cfg):
    dataset = Prepared(range(10), prepare=lambda v: v + 1, transform=double)
    train = DataLoader(dataset, batch_size=2, num_workers=cfg.workers)
    debug = DataLoader(dataset, batch_size=2, num_workers=0, collate_fn=lambda b: b)
    return train, debug
