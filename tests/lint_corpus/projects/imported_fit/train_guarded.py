import torch

from engine import fit

if __name__ == "__main__":
    fit(torch.nn.Linear(4, 1), torch.randn(64, 4), epochs=2)
