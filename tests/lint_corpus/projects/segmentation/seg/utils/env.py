"""Per-worker setup: the setup module of this project."""

import cv2


def worker_init_fn(worker_id):
    cv2.setNumThreads(0)
