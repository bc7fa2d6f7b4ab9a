"""A control before blame: a sample whose re-try alone fails is blamed only when a sample delivered
earlier, re-tried the same way, loads fine; when the control fails too, the failure is what the
workers share (here: a lock a main-process thread holds while the workers fork), healing stops and
nothing is quarantined. Real hangs, real forks."""

from __future__ import annotations

import fnmatch
import threading
import warnings

import pytest
import torch

import loaderdoctor

pytestmark = pytest.mark.slow

LOCK = threading.Lock()  # the dataset's: forked workers inherit it as the main process holds it


class UsesTheLock(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 16

    def __getitem__(self, index: int) -> int:
        with LOCK:
            return index


class OneBad(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 16

    def __getitem__(self, index: int) -> int:
        if index == 9:
            import ctypes

            ctypes.string_at(0)
        return index


def test_a_lock_held_at_fork_stops_healing_and_blames_no_sample() -> None:
    loader = loaderdoctor.DataLoader(
        UsesTheLock(), batch_size=4, num_workers=2, heal=True, hang_timeout=2
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert sorted(int(v) for batch in loader for v in batch) == list(range(16))
        held = threading.Event()
        release = threading.Event()

        def hold() -> None:
            with LOCK:
                held.set()
                release.wait(120)

        holder = threading.Thread(target=hold, daemon=True)
        holder.start()
        held.wait(10)
        try:
            with pytest.raises(loaderdoctor.HealingStoppedError) as stopped:
                list(loader)  # each new worker forks with the lock held: every sample hangs
        finally:
            release.set()
            holder.join(10)
    first_line = str(stopped.value).splitlines()[0]
    assert first_line.startswith("loaderdoctor healing stopped: sample ")
    assert "re-tried the same way (the control)" in first_line
    assert stopped.value.diagnosis.cause == "shared-failure"
    assert loader.report.quarantine == []


def test_a_bad_sample_is_blamed_with_the_control_that_cleared_the_rest() -> None:
    loader = loaderdoctor.DataLoader(OneBad(), batch_size=4, num_workers=1, heal=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        delivered = sorted(int(v) for batch in loader for v in batch)
    assert delivered == [i for i in range(16) if i != 9]
    (incident,) = loader.incidents
    assert (incident.diagnosis.cause, incident.action) == ("native-crash", "quarantined")
    controls = fnmatch.filter(
        incident.diagnosis.evidence,
        "control: sample *, loaded whole earlier, loaded fine alone the same way",
    )
    assert len(controls) == 1


class FirstBad(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 16

    def __getitem__(self, index: int) -> int:
        if index == 0:
            import ctypes

            ctypes.string_at(0)
        return index


def test_a_lock_held_before_the_first_batch_stops_healing_on_untried_controls() -> None:
    # nothing ever loaded: samples owed in other batches, re-tried alone, stand in as controls
    loader = loaderdoctor.DataLoader(
        UsesTheLock(), batch_size=4, num_workers=2, heal=True, hang_timeout=2
    )
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with LOCK:
            held.set()
            release.wait(120)

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    held.wait(10)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with pytest.raises(loaderdoctor.HealingStoppedError) as stopped:
                list(loader)
    finally:
        release.set()
        holder.join(10)
    first_line = str(stopped.value).splitlines()[0]
    assert "none loaded whole yet in this run and each re-tried the same way" in first_line
    assert stopped.value.diagnosis.cause == "shared-failure"
    assert [i.action for i in loader.incidents] == ["raised"]  # no sample quarantined first
    assert loader.report.quarantine == []


def test_a_bad_first_sample_is_cleared_by_an_untried_control() -> None:
    loader = loaderdoctor.DataLoader(FirstBad(), batch_size=4, num_workers=1, heal=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        delivered = sorted(int(v) for batch in loader for v in batch)
    assert delivered == list(range(1, 16))
    (incident,) = loader.incidents
    assert (incident.diagnosis.cause, incident.action) == ("native-crash", "quarantined")
    controls = fnmatch.filter(
        incident.diagnosis.evidence,
        "control: sample *, not loaded before (no sample had loaded whole yet), loaded fine "
        "alone the same way",
    )
    assert len(controls) == 1, incident.diagnosis.evidence


class BadFirstAndLast(torch.utils.data.Dataset):
    """Sample 0 segfaults its worker; 6 and 7, the untried controls picked first (the owed
    batch's last and middle), raise: bad samples of their own, which fail another way."""

    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int) -> int:
        if index == 0:
            import ctypes

            ctypes.string_at(0)
        if index in (6, 7):
            raise ValueError(f"bad sample {index}")
        return index


def test_untried_controls_that_fail_another_way_are_bad_samples_not_a_shared_failure() -> None:
    loader = loaderdoctor.DataLoader(BadFirstAndLast(), batch_size=4, num_workers=1, heal=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        delivered = sorted(int(v) for batch in loader for v in batch)
    assert delivered == [1, 2, 3, 4, 5]
    assert [(i.diagnosis.cause, i.action) for i in loader.incidents] == [
        ("native-crash", "quarantined"),
        ("sample-error", "skipped"),
        ("sample-error", "skipped"),
    ]
    evidence = loader.incidents[0].diagnosis.evidence
    assert [line for line in evidence if line.startswith("control:")] == [
        "control: sample 7, not loaded before, failed alone another way (sample-error, where "
        "sample 0's was native-crash): a bad sample of its own, it clears nothing",
        "control: sample 6, not loaded before, failed alone another way (sample-error, where "
        "sample 0's was native-crash): a bad sample of its own, it clears nothing",
        "control: sample 4, not loaded before (no sample had loaded whole yet), loaded fine "
        "alone the same way",
    ]


class Slow(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 12

    def __getitem__(self, index: int) -> int:
        if index == 6:
            import time

            time.sleep(8)
        return index


def test_the_users_timeout_holds_in_the_re_try_alone() -> None:
    # timeout=2 and a sample of 8 s: re-tried alone without the user's timeout it loaded "fine",
    # and healing looped on it; under the same timeout it fails again, and the control clears
    # the rest
    loader = loaderdoctor.DataLoader(Slow(), batch_size=3, num_workers=1, timeout=2, heal=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        delivered = sorted(int(v) for batch in loader for v in batch)
    assert delivered == [i for i in range(12) if i != 6]
    (incident,) = loader.incidents
    assert (incident.diagnosis.cause, incident.action, incident.diagnosis.indices) == (
        "worker-hang",
        "quarantined",
        [6],
    )


def test_healing_a_real_bad_sample_costs_one_extra_probe_at_most(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from loaderdoctor.supervise.parent import iterator

    probed: list[list[int]] = []
    probe = iterator.probe_alone

    def counted(snapshot: object, indices: list[int], **kwargs: object) -> object:
        probed.append(list(indices))
        return probe(snapshot, indices, **kwargs)

    monkeypatch.setattr(iterator, "probe_alone", counted)
    loader = loaderdoctor.DataLoader(OneBad(), batch_size=4, num_workers=1, heal=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        delivered = sorted(int(v) for batch in loader for v in batch)
    assert delivered == [i for i in range(16) if i != 9]
    # the sample alone, then one control loaded whole earlier: nothing else is re-tried
    assert len(probed) == 2, probed
    assert probed[0] == [9]
    assert probed[1][0] in range(8)
