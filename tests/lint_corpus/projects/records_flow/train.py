import pickle

from torch.utils.data import DataLoader

from roidb_data import Boxes, Files, LabelCache, Records, RoiDataset, combined_roidb


def main():
    roidb = combined_roidb("cache.pkl")
    dataset = RoiDataset(roidb, 600)
    for loader in (
        DataLoader(dataset, num_workers=4),
        DataLoader(Records("a.json"), num_workers=4),
        DataLoader(LabelCache("labels.npy"), num_workers=4),
        DataLoader(Files("b.json"), num_workers=4),
    ):
        for batch in loader:
            pass


if __name__ == "__main__":
    main()


def check_pickling():
    boxes = [1, 2, 3]
    dataset = Boxes(boxes)
    boxes = pickle.loads(pickle.dumps(boxes))  # rebound after the call: not what was passed
    return dataset, boxes
