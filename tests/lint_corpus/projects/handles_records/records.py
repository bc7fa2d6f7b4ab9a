import csv
import json

import numpy as np


def read_rows(path):
    with open(path, newline="") as handle:
        return list(csv.reader(handle))


def to_record(row):
    return {"image": row[0], "label": int(row[1]), "boxes": [float(v) for v in row[2:]]}


def load_records(path):
    return [to_record(row) for row in read_rows(path)]


def load_items(path, split):
    with open(path) as handle:
        data = json.load(handle)
    items = []
    for entry in data["images"]:
        if entry["split"] == split:
            items.append((entry["file_name"], int(entry["category_id"])))
    return items


def row_views(path):
    table = np.load(path)
    return [table[i] for i in range(len(table))]
