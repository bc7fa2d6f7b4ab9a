# expect:
# ruff: noqa
# The loop rebinds the Dataset through a tuple target, so each turn builds a different loader
# (issue 26 item 7); bad/ld104_probe_each_batch.py is the twin that does not.
from torch.utils.data import DataLoader


def main(make, model, train_set):
    train_loader = DataLoader(train_set, batch_size=4, num_workers=4)
    for batch in train_loader:
        model(batch)
        _dataset, _ = [make(batch), None]
        probe = DataLoader(_dataset, batch_size=4, num_workers=4)
        for item in probe:
            model(item)
