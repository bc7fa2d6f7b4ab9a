import torch
from torch.utils.data.dataloader import DataLoader


class Trainer:
    def __init__(self, config, model, train_dataset):
        self.config = config
        self.model = model
        self.train_dataset = train_dataset

    def run(self):
        config = self.config
        train_loader = DataLoader(
            self.train_dataset,
            sampler=torch.utils.data.RandomSampler(self.train_dataset, replacement=True, num_samples=int(1e10)),
            shuffle=False,
            pin_memory=True,
            batch_size=config.batch_size,
            num_workers=config.num_workers,
        )
        data_iter = iter(train_loader)  # deny: LD104
        while True:
            batch = next(data_iter)
            self.model(*batch)
