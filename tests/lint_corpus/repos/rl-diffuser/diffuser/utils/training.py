import torch


def cycle(dl):
    while True:
        for data in dl:
            yield data


class Trainer(object):
    def __init__(self, diffusion_model, dataset, train_batch_size=32):
        self.model = diffusion_model
        self.dataset = dataset
        self.dataloader = cycle(
            torch.utils.data.DataLoader(
                self.dataset, batch_size=train_batch_size, num_workers=1, shuffle=True, pin_memory=True
            )
        )

    def train(self, n_train_steps):
        for step in range(n_train_steps):
            batch = next(self.dataloader)
            self.model.loss(*batch)
