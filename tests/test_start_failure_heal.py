"""Workers that cannot start: healing loads in the main process only where the cause's catalog row
says so (``heals={START_FAILURE}``); any other start failure raises, as under stock torch.

No process starts: each context's ``Process.start`` fails the way ``fork()`` does.
"""

from __future__ import annotations

import errno
import multiprocessing.context
import warnings

import pytest
import torch

import loaderdoctor
from loaderdoctor.supervise.heal import HealWarning


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
