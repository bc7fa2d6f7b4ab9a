"""Workers that cannot start: healing loads in the main process only where the cause's catalog row
says so (``heals={START_FAILURE}``); any other start failure raises, as under stock torch.

No process starts in the first two tests: each context's ``Process.start`` fails the way
``fork()`` does.
"""

from __future__ import annotations

import errno
import multiprocessing.context
import os
import signal
import time
import warnings
from typing import Any

import pytest
import torch

import loaderdoctor
from loaderdoctor.supervise.heal import HealWarning
from loaderdoctor.supervise.parent.iterator import SupervisedMultiProcessingIter


def _failing_context(number: int, message: str) -> multiprocessing.context.ForkContext:
    class CannotStart(multiprocessing.context.ForkProcess):
        def start(self) -> None:
            raise OSError(number, message)

    class Context(multiprocessing.context.ForkContext):
        Process = CannotStart  # type: ignore[assignment]

    return Context()


def _loader(number: int, message: str) -> loaderdoctor.DataLoader:
    return loaderdoctor.DataLoader(
        [torch.tensor([i]) for i in range(6)],
        batch_size=2,
        num_workers=2,
        heal=True,
        multiprocessing_context=_failing_context(number, message),
    )


def test_at_the_process_limit_loading_moves_to_the_main_process() -> None:
    loader = _loader(errno.EAGAIN, "Resource temporarily unavailable")  # process-limit
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        epochs = [[batch.flatten().tolist() for batch in loader] for _ in range(2)]
    assert epochs == [[[0, 1], [2, 3], [4, 5]]] * 2
    [warning] = [w for w in caught if issubclass(w.category, HealWarning)]
    assert str(warning.message).endswith(
        "[process-limit] -> loading in the main process (num_workers=0)"
    )
    [incident] = loader.report.incidents
    assert (incident.diagnosis.cause, incident.action) == ("process-limit", "backed-off")
    assert incident.diagnosis.evidence[-1] == (
        "the epoch loads in the main process instead (num_workers=0)"
    )


def test_a_start_failure_whose_row_does_not_say_so_is_raised_even_when_healing() -> None:
    # fd-exhausted heals as environmental, not as a start failure: on main every start failure
    # loaded in the main process whatever its cause.
    loader = _loader(errno.EMFILE, "Too many open files")
    with pytest.raises(OSError) as raised:
        list(loader)
    assert raised.value.errno == errno.EMFILE
    assert raised.value.diagnosis.cause == "fd-exhausted"  # type: ignore[attr-defined]
    assert [(i.diagnosis.cause, i.action) for i in loader.report.incidents] == [
        ("fd-exhausted", "raised")
    ]


class KillsItsWorkerAtZero(torch.utils.data.Dataset):
    """Sample 0 SIGKILLs the worker that loads it (in the main process it loads)."""

    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int) -> torch.Tensor:
        if index == 0 and torch.utils.data.get_worker_info() is not None:
            from ld_datasets import quiet_result_queue

            quiet_result_queue()
            os.kill(os.getpid(), signal.SIGKILL)
        return torch.tensor([index])


def _dead(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads a worker's state in /proc")
def test_a_worker_killed_while_torch_sends_the_first_indices_is_a_death_not_a_start_failure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Under load a worker can die while torch's __init__ still sends the first indices; torch's
    # SIGCHLD handler then raised out of __init__ and the death was taken for a start failure
    # (a worker-exit "start failure", now raised; main loaded the epoch in-process). Here the
    # first send waits for worker 0 to die, which load only sometimes does. (torchdata's
    # iterator waits for every worker's first state before it sends an index, and that wait
    # is where its watch starts and torch's check stops.)
    real = SupervisedMultiProcessingIter.ld_try_put_index
    first: list[Any] = []  # the training epoch's iterator, not the probes healing starts later

    def send_then_wait_for_the_death(iterator: Any) -> None:
        real(iterator)
        first[:] = first or [iterator]
        workers = iterator._ld.parts.books.processes().processes
        if iterator is first[0] and iterator._ld.parts.books.sent == 1:  # sample 0, worker 0
            deadline = time.monotonic() + 60
            while not _dead(workers[0].pid) and time.monotonic() < deadline:
                time.sleep(0.01)
            assert _dead(workers[0].pid), "worker 0 did not die at sample 0"
            time.sleep(0.2)  # SIGCHLD is handled between two bytecodes of this loop

    # under torch's name, which torch's _reset calls (the hook is bound there once, at class
    # creation: patching ld_try_put_index alone would leave the race to chance)
    monkeypatch.setattr(
        SupervisedMultiProcessingIter, "_try_put_index", send_then_wait_for_the_death
    )
    loader = loaderdoctor.DataLoader(
        KillsItsWorkerAtZero(), batch_size=2, num_workers=2, prefetch_factor=1, heal=True
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", HealWarning)
        delivered = sorted(int(i) for batch in loader for i in batch)
    assert delivered == [1, 2, 3, 4, 5, 6, 7]
    assert [(i.diagnosis.cause, i.action) for i in loader.report.incidents] == [
        ("killed-by-signal", "quarantined")
    ]
