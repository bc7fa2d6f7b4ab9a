import torch

from dataset import LmdbDataset


def train(opt):
    train_dataset = LmdbDataset(opt.train_data, opt)
    loader = torch.utils.data.DataLoader(train_dataset, batch_size=opt.batch_size, num_workers=int(opt.workers))
    for batch in loader:
        step(batch)


if __name__ == "__main__":
    train(parse_opt())
