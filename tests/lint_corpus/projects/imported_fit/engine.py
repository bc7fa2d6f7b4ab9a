from torch.utils.data import DataLoader


def fit(model, dataset, epochs):
    loader = DataLoader(dataset, batch_size=32, num_workers=4)
    for epoch in range(epochs):
        for batch in loader:
            model(batch)
