from torch.utils.data import DataLoader

from data_utils import TextMelLoader


def prepare_dataloaders(hparams):
    trainset = TextMelLoader(hparams.training_files, hparams)
    return DataLoader(trainset, num_workers=1, shuffle=True, batch_size=hparams.batch_size)


def train(hparams):
    for batch in prepare_dataloaders(hparams):
        step(batch)


if __name__ == "__main__":
    train(create_hparams())
