# expect:
# ruff: noqa
"""Train a small language model on a tokenized corpus stored as one flat token array."""

import os

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

BLOCK_SIZE = 256
BATCH_SIZE = 32
NUM_WORKERS = 4


class Vocabulary:
    """Not a Dataset: a lookup table the tokenizer uses in the main process."""

    def __init__(self, path):
        with open(path, encoding="utf-8") as handle:
            self.tokens = [line.rstrip("\n") for line in handle]
        self.index = {token: position for position, token in enumerate(self.tokens)}

    def __len__(self):
        return len(self.tokens)

    def __getitem__(self, position):
        return self.tokens[position]

    def encode(self, text):
        return [self.index.get(word, 0) for word in text.split()]


class TokenBlocks(Dataset):
    def __init__(self, token_file):
        self.tokens = np.memmap(token_file, dtype=np.uint16, mode="r")

    def __len__(self):
        return (len(self.tokens) - 1) // BLOCK_SIZE

    def __getitem__(self, index):
        start = index * BLOCK_SIZE
        chunk = torch.from_numpy(self.tokens[start : start + BLOCK_SIZE + 1].astype(np.int64))
        return chunk[:-1], chunk[1:]


def pad_collate(batch):
    inputs, targets = zip(*batch)
    return torch.stack(inputs), torch.stack(targets)


def train(token_file, vocab_file, steps=1000):
    vocab = Vocabulary(vocab_file)
    model = torch.nn.Sequential(
        torch.nn.Embedding(len(vocab), 128), torch.nn.Linear(128, len(vocab))
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-4)
    loader = DataLoader(
        TokenBlocks(token_file),
        batch_size=BATCH_SIZE,
        shuffle=True,
        num_workers=NUM_WORKERS,
        collate_fn=pad_collate,
        persistent_workers=True,
    )
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model.to(device)
    step = 0
    while step < steps:
        for inputs, targets in loader:
            inputs, targets = inputs.to(device), targets.to(device)
            logits = model(inputs)
            loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            if step >= steps:
                break


if __name__ == "__main__":
    train(os.environ.get("TOKENS", "train.bin"), os.environ.get("VOCAB", "vocab.txt"))
