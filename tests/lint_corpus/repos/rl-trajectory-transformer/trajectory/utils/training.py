from torch.utils.data.dataloader import DataLoader


class Trainer:
    def __init__(self, config):
        self.config = config

    def train(self, model, dataset, n_epochs=1):
        config = self.config
        loader = DataLoader(  # deny: LD104
            dataset, shuffle=True, pin_memory=True,
            batch_size=config.batch_size, num_workers=config.num_workers,
        )
        for _ in range(n_epochs):
            for batch in loader:
                model(*batch)
