import random

import numpy as np
import torch


def worker_init_fn(worker_id, rank, seed):
    worker_seed = rank + seed
    random.seed(worker_seed)  # want: LD110
    np.random.seed(worker_seed)
    torch.manual_seed(worker_seed)
