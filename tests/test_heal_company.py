"""Failures that are not one sample's: a batch that fails only in company (a ragged field that
torch's default collate cannot stack), and deaths, hangs and a dead data server that strike
sample after sample. Healing names the shared cause and quarantines nothing. Real workers, real
collate errors, real kills."""

from __future__ import annotations

import socket
import threading
import warnings

import pytest
import torch

import loaderdoctor

pytestmark = pytest.mark.slow


class Detections(torch.utils.data.Dataset):
    """An image and its boxes: most images hold one object, every fifth holds two to four."""

    def __len__(self) -> int:
        return 40

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        objects = 1 if index % 5 else 2 + index % 3
        return torch.zeros(3, 8, 8), torch.full((objects, 4), float(index))


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_ragged_targets_are_a_collate_problem_and_nothing_is_quarantined(
    start_method: str,
) -> None:
    loader = loaderdoctor.DataLoader(
        Detections(),
        batch_size=4,
        num_workers=2,
        heal=True,
        multiprocessing_context=start_method,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(loaderdoctor.HealingStoppedError) as stopped:
            for _ in range(2):
                list(loader)
    diagnosis = stopped.value.diagnosis
    assert diagnosis.cause == "collate-error"
    assert diagnosis.indices == []
    assert diagnosis.evidence[0].startswith(
        "each sample loads fine alone; only collating them together fails: tensor #1 of a "
        "sample is [1, 4] in one and ["
    )
    assert "the field is ragged by design" in diagnosis.evidence[1]
    assert diagnosis.fixes[0].startswith(
        "Give the DataLoader a collate_fn that handles samples of different shapes"
    )
    assert loader.report.quarantine == []
    assert loader.report.status != "healed"
    # each member alone is fine: the samples skipped for it are every one with more objects
    for sample in (0, 5, 10):
        image, boxes = Detections()[sample]
        assert torch.utils.data.default_collate([(image, boxes)])[1].shape[0] == 1


class SecondShardBroken(torch.utils.data.Dataset):
    """Samples 8 on sit in a shard whose reader dies (killed, or stuck) on every one of them,
    alone or not; the first shard's samples load and clear the rest as controls."""

    def __init__(self, how: str) -> None:
        self.how = how

    def __len__(self) -> int:
        return 64  # the skip budget (half) stays far off: the streak decides

    def __getitem__(self, index: int) -> int:
        import os
        import signal
        import time

        if index >= 8 and torch.utils.data.get_worker_info() is not None:
            if self.how == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(300)
        return index


@pytest.mark.parametrize("how", ["kill", pytest.param("hang", marks=pytest.mark.extended)])
def test_deaths_and_hangs_alike_on_sample_after_sample_are_a_shared_failure(how: str) -> None:
    loader = loaderdoctor.DataLoader(
        SecondShardBroken(how), batch_size=4, num_workers=2, heal=True, hang_timeout=1
    )
    delivered: list[int] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(loaderdoctor.HealingStoppedError) as stopped:
            for batch in loader:
                delivered.extend(int(v) for v in batch)
    # the first shard's batches, in order, up to where healing stopped: none where a worker was
    # killed before its queue's feeder thread sent its first batch (owed, and not re-sent yet)
    assert delivered in ([], list(range(4)), list(range(8)))
    diagnosis = stopped.value.diagnosis
    assert diagnosis.cause == "shared-failure"
    assert diagnosis.evidence[1].startswith("8 different samples failed with the same error")
    assert diagnosis.evidence[2].startswith("likely cause: what the workers share, not the samples")
    assert loader.report.quarantine == []


class FromServer(torch.utils.data.Dataset):
    """Asks a local server for each sample, over a fresh connection."""

    def __init__(self, port: int) -> None:
        self.port = port

    def __len__(self) -> int:
        return 64

    def __getitem__(self, index: int) -> int:
        import socket

        with socket.create_connection(("127.0.0.1", self.port), timeout=2) as connection:
            connection.sendall(f"{index}\n".encode())
            return int(connection.makefile().readline())


def serve(listener: socket.socket, answers: int) -> None:
    """Answer ``answers`` requests, then die (the listening socket closes)."""
    with listener:
        for _ in range(answers):
            connection, _ = listener.accept()
            with connection:
                connection.sendall(connection.makefile().readline().encode())


@pytest.mark.parametrize(
    ("start_method", "error"),
    [
        # a forked worker holds the listening socket open: connections wait, unanswered
        pytest.param("fork", "TimeoutError: timed out", marks=pytest.mark.extended),
        ("spawn", "ConnectionRefusedError: [Errno 111] Connection refused"),
    ],
)
def test_a_data_server_that_dies_mid_epoch_is_a_shared_failure(
    start_method: str, error: str
) -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    server = threading.Thread(target=serve, args=(listener, 12), daemon=True)
    server.start()
    loader = loaderdoctor.DataLoader(
        FromServer(listener.getsockname()[1]),
        batch_size=4,
        num_workers=2,
        heal=True,
        multiprocessing_context=start_method,
    )
    delivered: list[int] = []
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with pytest.raises(loaderdoctor.HealingStoppedError) as stopped:
                for batch in loader:
                    delivered.extend(int(v) for v in batch)
    finally:
        listener.close()
        server.join(10)
    diagnosis = stopped.value.diagnosis
    assert diagnosis.cause == "shared-failure"
    assert diagnosis.evidence[0] == (
        f"8 different samples failed with the same error, with no sample delivered between: {error}"
    )
    assert loader.report.quarantine == []
    assert len(delivered) == len(set(delivered)) <= 12  # what the server answered, once each
