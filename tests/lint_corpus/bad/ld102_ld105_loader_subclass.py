# expect: LD102 LD105
# ruff: noqa
# A project subclass of DataLoader (deepspeech's AudioDataLoader, YOLOX's DataLoader) builds
# DataLoaders too; one whose own __init__ sets its own defaults is not guessed at.
from torch.utils.data import DataLoader


class AudioLoader(DataLoader):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)


class BucketLoader(AudioLoader):
    pass


class FixedLoader(DataLoader):
    def __init__(self, dataset, workers=8):
        super().__init__(dataset, num_workers=workers, persistent_workers=True)


def main(dataset):
    debug = AudioLoader(dataset, batch_size=4, persistent_workers=True)
    train = BucketLoader(dataset, num_workers=4, collate_fn=lambda batch: batch)
    fixed = FixedLoader(dataset, persistent_workers=True)
    return debug, train, fixed
