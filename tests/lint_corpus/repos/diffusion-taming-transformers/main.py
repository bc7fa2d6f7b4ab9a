from torch.utils.data import DataLoader


class DataModuleFromConfig:
    def __init__(self, batch_size, train=None, num_workers=None):
        self.batch_size = batch_size
        self.num_workers = num_workers if num_workers is not None else batch_size * 2
        self.datasets = {"train": instantiate_from_config(train)}

    def train_dataloader(self):
        return DataLoader(
            self.datasets["train"], batch_size=self.batch_size, num_workers=self.num_workers
        )


if __name__ == "__main__":
    DataModuleFromConfig(8, train={"target": "taming.data.custom.CustomTrain"})
