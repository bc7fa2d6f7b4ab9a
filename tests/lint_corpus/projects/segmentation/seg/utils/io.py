import json


def load_json(path):
    with open(path) as handle:
        return json.load(handle)
