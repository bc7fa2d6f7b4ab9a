import os

import lmdb


def open_db(root):
    env = lmdb.open(root, readonly=True, lock=False)
    return env


def db_path(root):
    return os.path.join(root, "data.mdb")
