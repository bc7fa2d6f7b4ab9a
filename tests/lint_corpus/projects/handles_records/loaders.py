from torch.utils.data import DataLoader

from datasets import Captions


def get_loader(captions, vocab, batch_size, num_workers):
    dataset = Captions(captions, vocab)
    return DataLoader(dataset, batch_size=batch_size, shuffle=True, num_workers=num_workers)
