"""Fails loudly when a torch release moves a private name loaderdoctor relies on."""

from __future__ import annotations

import importlib

from loaderdoctor import torch_compat


def test_private_names_exist() -> None:
    for dotted in torch_compat.PRIVATE_NAMES:
        module_name, attribute = dotted.rsplit(".", 1)
        module = importlib.import_module(module_name)
        assert hasattr(module, attribute), f"torch moved {dotted}"


def test_iterator_attributes_exist() -> None:
    for name in torch_compat.ITERATOR_ATTRIBUTES:
        if name.startswith("_") and not callable(
            getattr(torch_compat.MultiProcessingIter, name, None)
        ):
            continue  # instance attributes are checked by the equivalence tests
        assert hasattr(torch_compat.MultiProcessingIter, name), f"torch removed {name}"


def test_worker_info_can_be_replaced() -> None:
    import dataclasses

    from torch.utils.data._utils.worker import WorkerInfo

    info = WorkerInfo(id=0, num_workers=1, seed=1, dataset=[1])
    assert dataclasses.replace(info, dataset=[2]).dataset == [2]


def test_worker_pids_are_the_iterators_own_workers() -> None:
    import psutil
    import torch

    loader = torch.utils.data.DataLoader(list(range(8)), batch_size=2, num_workers=2)
    iterator = iter(loader)
    try:
        pids = torch_compat.worker_pids(iterator)
        children = {child.pid for child in psutil.Process().children()}
        assert len(pids) == 2 and pids <= children
    finally:
        del iterator  # shuts the workers down
    assert torch_compat.worker_pids(iter(torch.utils.data.DataLoader([1, 2]))) == set()
