"""A Lightning ``Trainer.fit`` on CPU over a torch Dataset with a file list."""

from __future__ import annotations

import lightning
import torch
from eco_plan import Files, record


class Tiny(lightning.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_index):
        x, idx = batch
        record(idx)
        return self.layer(x).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=1e-3)

    def train_dataloader(self):
        return torch.utils.data.DataLoader(Files(), batch_size=8, num_workers=2)


def main() -> None:
    trainer = lightning.Trainer(
        max_epochs=1,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Tiny())


if __name__ == "__main__":
    main()
