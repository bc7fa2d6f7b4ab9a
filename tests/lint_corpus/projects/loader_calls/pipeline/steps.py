from pipeline.data import build_loader


def fit(epochs):
    loader = build_loader(1024)
    for _ in range(epochs):
        for batch in loader:
            batch.mean()
