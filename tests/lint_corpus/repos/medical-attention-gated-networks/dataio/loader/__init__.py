from dataio.loader.ukbb_dataset import UKBBDataset


def get_dataset(name):
    return {"ukbb_sax": UKBBDataset, "test_sax": UKBBDataset}[name]
