import torch
from torch.utils.data import Dataset

from mingpt.trainer import Trainer


class CharDataset(Dataset):
    def __init__(self, config, data):
        chars = sorted(list(set(data)))
        self.stoi = {ch: i for i, ch in enumerate(chars)}
        self.itos = {i: ch for i, ch in enumerate(chars)}
        self.data = data  # deny: LD107
        self.block_size = config.block_size

    def __len__(self):
        return len(self.data) - self.block_size

    def __getitem__(self, idx):
        chunk = self.data[idx : idx + self.block_size + 1]
        dix = [self.stoi[s] for s in chunk]
        return torch.tensor(dix[:-1], dtype=torch.long), torch.tensor(dix[1:], dtype=torch.long)


if __name__ == "__main__":
    config = get_config()
    text = open("input.txt", "r").read()
    train_dataset = CharDataset(config.data, text)
    trainer = Trainer(config.trainer, None, train_dataset)
    trainer.run()
