# expect: LD104
# ruff: noqa
# The same DataLoader built again for every batch of another one.
from torch.utils.data import DataLoader


def main(make, model, train_set, probe_set):
    train_loader = DataLoader(train_set, batch_size=4, num_workers=4)
    for batch in train_loader:
        model(batch)
        probe = DataLoader(probe_set, batch_size=4, num_workers=4)
        for item in probe:
            model(item)
