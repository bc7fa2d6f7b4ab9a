# expect: LD104
# ruff: noqa
# The same in a while loop, inside a method, with num_workers from a config.
from torch.utils.data import DataLoader


class Trainer:
    def __init__(self, cfg, dataset):
        self.cfg = cfg
        self.dataset = dataset
        self.step = 0

    def fit(self):
        while self.step < self.cfg.max_steps:
            loader = DataLoader(self.dataset, batch_size=16, num_workers=self.cfg.num_workers)
            for batch in loader:
                self.step += 1
