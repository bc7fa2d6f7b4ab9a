import torch

from engine import fit

model = torch.nn.Linear(4, 1)
fit(model, torch.randn(64, 4), epochs=2)
