import torch


def to_tensor(values):
    return torch.tensor(values).cuda()


def describe(values):
    return f"{len(values)} values, GPU: {torch.cuda.is_available()}"
