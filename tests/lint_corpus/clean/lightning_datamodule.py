# expect:
# ruff: noqa
"""A LightningDataModule: the loaders are built in methods the Trainer calls."""

import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset, random_split


class RandomDataModule(L.LightningDataModule):
    def __init__(self, batch_size=32, num_workers=4):
        super().__init__()
        self.batch_size = batch_size
        self.num_workers = num_workers

    def setup(self, stage=None):
        full = TensorDataset(torch.randn(1000, 16), torch.randint(0, 4, (1000,)))
        self.train_set, self.val_set = random_split(full, [900, 100])

    def collate(self, batch):
        inputs, labels = zip(*batch)
        return torch.stack(inputs), torch.stack(labels)

    def train_dataloader(self):
        return DataLoader(
            self.train_set,
            batch_size=self.batch_size,
            shuffle=True,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
            collate_fn=self.collate,
        )

    def val_dataloader(self):
        return DataLoader(self.val_set, batch_size=self.batch_size, num_workers=self.num_workers)


class Classifier(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(16, 4)

    def training_step(self, batch, batch_idx):
        inputs, labels = batch
        return torch.nn.functional.cross_entropy(self.layer(inputs), labels)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)


if __name__ == "__main__":
    trainer = L.Trainer(max_epochs=2)
    trainer.fit(Classifier(), datamodule=RandomDataModule())
