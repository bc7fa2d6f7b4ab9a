# expect:
# Loops that must build a new DataLoader each time: a loader per split (its arguments depend
# on the loop), a Dataset changed before each epoch, and a fold loop whose loader is iterated
# by an inner epoch loop.
from torch.utils.data import DataLoader


def evaluate_all(datasets, model):
    for name, dataset in datasets.items():
        for batch in DataLoader(dataset, batch_size=64, num_workers=4):
            model(batch)


def curriculum(dataset, model, epochs):
    for epoch in range(epochs):
        dataset.set_difficulty(epoch)
        loader = DataLoader(dataset, batch_size=64, num_workers=4)
        for batch in loader:
            model(batch)


def cross_validate(folds, model):
    for fold in range(5):
        loader = DataLoader(folds, batch_size=64, num_workers=4, persistent_workers=True)
        for epoch in range(3):
            for batch in loader:
                model(batch)
