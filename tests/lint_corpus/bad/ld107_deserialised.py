# expect: LD107 LD107 LD107 LD107 LD107 LD107 LD107 LD107
# ruff: noqa
# Big deserialised Python objects kept on Datasets that run in 4 workers.
import glob
import json
import pickle

import pandas as pd
import yaml
from pycocotools.coco import COCO
from torch.utils.data import DataLoader, Dataset


class Base(Dataset):
    def __len__(self):
        return 10


class Direct(Base):
    def __init__(self, path):
        with open(path) as handle:
            self.annotations = json.load(handle)  # directly

    def __getitem__(self, index):
        return self.annotations[index]


class ViaLocal(Base):
    def __init__(self, path):
        with open(path, "rb") as handle:
            blob = pickle.load(handle)
        self.captions = blob["captions"]  # a part of it, through a local

    def __getitem__(self, index):
        return self.captions[index]


class Accumulated(Base):
    def __init__(self, root):
        self.items = []
        for path in sorted(glob.glob(root + "/*.json")):
            with open(path) as handle:
                self.items += json.load(handle)  # accumulated over files

    def __getitem__(self, index):
        return self.items[index]


class PerRecord(Base):
    def __init__(self, path):
        with open(path) as handle:
            raw = yaml.safe_load(handle)
        self.records = [{"file": r["file"], "box": r["box"]} for r in raw["objects"]]

    def __getitem__(self, index):
        return self.records[index]


class Rows(Base):
    def __init__(self, path):
        frame = pd.read_csv(path)
        self.rows = frame.to_dict("records")  # pandas rows turned into dicts

    def __getitem__(self, index):
        return self.rows[index]


class GroupedInLoop(Base):
    def __init__(self, path):
        with open(path) as handle:
            data = json.load(handle)
        by_image = {}
        for annotation in data["annotations"]:
            by_image.setdefault(annotation["image_id"], []).append(annotation)
        self.by_image = by_image

    def __getitem__(self, index):
        return self.by_image[index]


class Coco(Base):
    def __init__(self, path):
        self.coco = COCO(path)
        self.ids = sorted(self.coco.imgs.keys())  # ids: info only

    def __getitem__(self, index):
        return self.coco.loadAnns(self.coco.getAnnIds(imgIds=self.ids[index]))


class KeptTwice(Base):
    def __init__(self, path):
        with open(path) as handle:
            data = json.load(handle)
        self.meta = data  # reported once: the same object as self.items
        self.items = data["items"]

    def __getitem__(self, index):
        return self.items[index], self.meta["root"]


def main(paths):
    classes = (Direct, ViaLocal, Accumulated, PerRecord, Rows, GroupedInLoop, Coco, KeptTwice)
    return [DataLoader(cls(path), num_workers=4) for cls, path in zip(classes, paths)]
