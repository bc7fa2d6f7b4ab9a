"""The healing decision is pure data in, data out: every rule from a table, no processes."""

from __future__ import annotations

from dataclasses import replace

import pytest

from loaderdoctor.forensics import Diagnosis, catalog
from loaderdoctor.supervise import heal_policy, sharing
from loaderdoctor.supervise.heal_policy import (
    MAX_DEATHS_IN_A_ROW,
    ActionKind,
    Backoff,
    HealPolicy,
    Situation,
    ladder,
    replaces_one_worker,
    step_down,
)

R, P, Q, B, F, S = (
    ActionKind.RAISE,
    ActionKind.PROBE,
    ActionKind.QUARANTINE,
    ActionKind.BACK_OFF,
    ActionKind.FALL_BACK,
    ActionKind.RESPAWN,
)
BASE = Situation(
    heal=True, iterable=False, deaths_in_a_row=0, num_workers=4, prefetch_factor=2, kind="death"
)


def verdict(cause: str) -> Diagnosis:
    return Diagnosis(cause, cause, 0.9, 0, 1, None, None, [], [], [])


TABLE = [
    # cause, situation changes, expected (kind, workers, prefetch)
    ("native-crash", {"heal": False, "culprit": 3}, (R, 4, 2)),
    # a stream: the same pool size (fewer workers would re-shard it), its workers resume; no
    # probe (an item of a stream cannot be loaded alone), no back-off, no plain-torch fall-back
    ("native-crash", {"iterable": True, "culprit": 3}, (S, 4, 2)),
    ("killed-by-signal", {"iterable": True, "culprit": 3}, (S, 4, 2)),
    ("oom-killed", {"iterable": True, "culprit": 3, "prefetch_factor": 1}, (S, 4, 1)),
    ("worker-hang", {"iterable": True, "kind": "hang", "culprit": 3}, (S, 4, 2)),
    ("native-crash", {"iterable": True, "heal": False, "culprit": 3}, (R, 4, 2)),
    ("native-crash", {"iterable": True, "deaths_in_a_row": MAX_DEATHS_IN_A_ROW}, (R, 4, 2)),
    ("worker-exit", {"iterable": True, "reached_worker_init": False}, (R, 4, 2)),
    ("sample-error", {"iterable": True, "kind": "exception"}, (R, 4, 2)),
    ("shm-exhausted", {"iterable": True, "kind": "exception"}, (R, 4, 2)),
    # past max_deaths_in_a_row: the probe still decides (a sample to blame is the sample's
    # count); a death that blamed none stops healing, said as such
    ("native-crash", {"deaths_in_a_row": MAX_DEATHS_IN_A_ROW, "culprit": 3}, (P, 4, 2)),
    (
        "native-crash",
        {"deaths_in_a_row": MAX_DEATHS_IN_A_ROW, "culprit": 3, "probe_failed_again": True},
        (Q, 4, 2),
    ),
    (
        "native-crash",
        {"deaths_in_a_row": MAX_DEATHS_IN_A_ROW, "culprit": 3, "probe_failed_again": False},
        (R, 4, 2),
    ),
    (
        "native-crash",
        {"deaths_in_a_row": MAX_DEATHS_IN_A_ROW - 1, "culprit": 3, "probe_failed_again": False},
        (S, 4, 2),
    ),
    # a worker killed from outside while it started (before its init) is replaced; one that
    # exited on its own there cannot start at all
    ("killed-by-signal", {"reached_worker_init": False, "oom_ruled_out": True}, (S, 4, 2)),
    ("killed-by-signal", {"reached_worker_init": False, "iterable": True}, (S, 4, 2)),
    ("worker-exit", {"reached_worker_init": False}, (R, 4, 2)),
    # an outside SIGKILL the kernel shows was no OOM kill does not shrink the pool
    (
        "killed-by-signal",
        {
            "culprit": 3,
            "probe_failed_again": False,
            "oom_ruled_out": True,
            "loaded_fine_alone_before": 2,
        },
        (S, 4, 2),
    ),
    ("killed-by-signal", {"oom_ruled_out": True}, (S, 4, 2)),
    ("killed-by-signal", {"culprit": 3, "probe_failed_again": False}, (B, 4, 1)),
    ("native-crash", {"culprit": 3}, (P, 4, 2)),
    ("native-crash", {"culprit": 3, "probe_failed_again": True}, (Q, 4, 2)),
    # a sample quarantined already killed a worker that did not know it: no probe again
    ("native-crash", {"culprit": 3, "culprit_quarantined": True}, (Q, 4, 2)),
    ("oom-killed", {"culprit": 3, "culprit_quarantined": True}, (Q, 4, 2)),
    ("native-crash", {"culprit": 3, "probe_failed_again": False}, (S, 4, 2)),
    # the probe itself failed (its worker could not start, or a bug of ours): it could not tell,
    # so the sample is not quarantined but loads again in the respawned worker; no back-off
    ("native-crash", {"culprit": 3, "probe_error": "RuntimeError: boom"}, (S, 4, 2)),
    ("oom-killed", {"culprit": 3, "probe_error": "RuntimeError: boom"}, (S, 4, 2)),
    ("native-crash", {}, (S, 4, 2)),
    ("oom-killed", {"culprit": 3, "probe_failed_again": False}, (B, 4, 1)),
    ("oom-killed", {"culprit": 3, "probe_failed_again": False, "prefetch_factor": 1}, (B, 2, 1)),
    ("oom-killed", {"prefetch_factor": 1, "num_workers": 2}, (B, 1, 1)),
    # a process-killing cause never moves loading into the training process ...
    ("oom-killed", {"prefetch_factor": 1, "num_workers": 1}, (S, 1, 1)),
    ("killed-by-signal", {"prefetch_factor": 1, "num_workers": 1}, (S, 1, 1)),
    # ... unless the user allowed it
    ("oom-killed", {"prefetch_factor": 1, "num_workers": 1, "in_process_allowed": True}, (B, 0, 1)),
    # an exception that says "out of shared memory" may go in-process (no shm needed there)
    ("shm-exhausted", {"kind": "exception", "prefetch_factor": 1, "num_workers": 1}, (B, 0, 1)),
    ("fd-exhausted", {"kind": "exception"}, (B, 4, 1)),
    # out of descriptors under file_descriptor sharing: torch's own fix first, the same pool
    # again; under file_system already, the ladder
    ("fd-exhausted", {"kind": "exception", "sharing_strategy": "file_descriptor"}, (S, 4, 2)),
    (
        "fd-exhausted",
        {"kind": "exception", "stage": "send", "sharing_strategy": "file_descriptor"},
        (S, 4, 2),
    ),
    ("fd-exhausted", {"sharing_strategy": "file_descriptor"}, (S, 4, 2)),
    ("fd-exhausted", {"kind": "exception", "sharing_strategy": "file_system"}, (B, 4, 1)),
    (
        "fd-exhausted",
        {"kind": "exception", "stage": "send", "sharing_strategy": "file_system"},
        (B, 0, 1),
    ),
    ("sample-error", {"kind": "exception"}, (R, 4, 2)),
    ("batch-lost", {"kind": "exception", "stage": "send"}, (B, 0, 1)),
    ("worker-exit", {"reached_worker_init": False}, (R, 4, 2)),
    ("worker-hang", {"kind": "hang", "culprit": 7}, (Q, 4, 2)),
    ("worker-hang", {"kind": "hang"}, (S, 4, 2)),
    # num_workers fixed by the loader's own state (torchdata's StatefulDataLoader): prefetch may
    # step down, the workers never; no plain-torch fall-back; in-process loading is refused
    ("oom-killed", {"culprit": 3, "probe_failed_again": False, "workers_fixed": True}, (B, 4, 1)),
    ("oom-killed", {"prefetch_factor": 1, "workers_fixed": True}, (S, 4, 1)),
    ("batch-lost", {"kind": "exception", "stage": "send", "workers_fixed": True}, (S, 4, 2)),
    ("internal-error", {"workers_fixed": True}, (R, 4, 2)),
    ("unpicklable", {"kind": "start", "workers_fixed": True}, (R, 4, 2)),
    ("native-crash", {"culprit": 3, "probe_failed_again": True, "workers_fixed": True}, (Q, 4, 2)),
    # a pool that cannot be resumed exactly (torchdata's state with in_order=False): raised
    ("native-crash", {"culprit": 3, "resumes_exactly": False}, (R, 4, 2)),
    (
        "oom-killed",
        {"culprit": 3, "probe_failed_again": False, "resumes_exactly": False},
        (R, 4, 2),
    ),
    # where the pool can be stopped first, a hang's sample is re-tried alone: stuck again, it
    # is quarantined; fine alone, the pool was to blame: half the workers, nothing quarantined
    ("worker-hang", {"kind": "hang", "culprit": 7, "isolated_probe": True}, (P, 4, 2)),
    (
        "worker-hang",
        {"kind": "hang", "culprit": 7, "isolated_probe": True, "probe_failed_again": True},
        (Q, 4, 2),
    ),
    (
        "worker-hang",
        {"kind": "hang", "culprit": 7, "isolated_probe": True, "probe_failed_again": False},
        (B, 2, 1),
    ),
    (
        "worker-hang",
        {
            "kind": "hang",
            "culprit": 7,
            "isolated_probe": True,
            "num_workers": 3,
            "prefetch_factor": 1,
            "probe_failed_again": False,
        },
        (B, 1, 1),
    ),
    (
        "worker-hang",
        {
            "kind": "hang",
            "culprit": 7,
            "isolated_probe": True,
            "num_workers": 1,
            "probe_failed_again": False,
        },
        (S, 1, 2),
    ),
    (
        "worker-hang",
        {"kind": "hang", "culprit": 7, "isolated_probe": True, "probe_error": "RuntimeError: boom"},
        (S, 4, 2),
    ),
    # a death whose sample loads fine alone: not reproducible once; the second such points at
    # the pool (never below one worker: it killed a process)
    (
        "native-crash",
        {"culprit": 3, "probe_failed_again": False, "loaded_fine_alone_before": 1},
        (B, 2, 1),
    ),
    (
        "native-crash",
        {
            "culprit": 3,
            "probe_failed_again": False,
            "num_workers": 1,
            "loaded_fine_alone_before": 1,
        },
        (S, 1, 2),
    ),
    ("internal-error", {"kind": "exception"}, (F, 4, 2)),
    # a bug of ours is never a verdict on the job, healing or not: plain torch takes over
    ("internal-error", {"kind": "exception", "heal": False}, (F, 4, 2)),
    ("internal-error", {"kind": "exception", "iterable": True}, (F, 4, 2)),
    # not a stream part delivered: plain torch would start it again, delivering items twice
    (
        "internal-error",
        {"kind": "exception", "iterable": True, "stream_delivered": True},
        (R, 4, 2),
    ),
    ("internal-error", {"kind": "exception", "deaths_in_a_row": MAX_DEATHS_IN_A_ROW}, (F, 4, 2)),
    # workers that could not start: the cause's catalog row decides (``start-failure``)
    ("unpicklable", {"kind": "start"}, (B, 0, 1)),
    # where only spawn stands in the way, workers are forked: never the training process
    ("unpicklable", {"kind": "start", "fork_fallback": True}, (B, 4, 2)),
    ("main-guard-missing", {"kind": "start", "fork_fallback": True}, (B, 4, 2)),
    ("process-limit", {"kind": "start", "fork_fallback": True}, (B, 0, 1)),
    ("unpicklable", {"kind": "start", "iterable": True}, (B, 0, 1)),  # no item read yet
    ("unpicklable", {"kind": "start", "heal": False}, (R, 4, 2)),
    ("process-limit", {"kind": "start", "deaths_in_a_row": MAX_DEATHS_IN_A_ROW}, (B, 0, 1)),
    ("fd-exhausted", {"kind": "start"}, (R, 4, 2)),
    ("worker-exit", {"kind": "start"}, (R, 4, 2)),  # an error no rule knows
]


@pytest.mark.parametrize(("cause", "changes", "expected"), TABLE)
def test_decide(cause: str, changes: dict, expected: tuple) -> None:
    action = HealPolicy().decide(verdict(cause), replace(BASE, **changes))
    assert (action.kind, action.num_workers, action.prefetch_factor) == expected


def test_the_ladder_halves_workers_after_prefetch() -> None:
    assert ladder(8, 4, floor=1) == [(8, 4), (8, 1), (4, 1), (2, 1), (1, 1)]
    assert ladder(8, 4, floor=0) == [(8, 4), (8, 1), (4, 1), (2, 1), (1, 1), (0, 1)]
    assert step_down(3, 1, floor=1) == (1, 1)
    assert step_down(1, 1, floor=1) is None


def test_backoff_climbs_one_rung_after_a_clean_epoch() -> None:
    backoff = Backoff(4, 2, base_workers=4, base_prefetch=2)
    backoff.moved_to(2, 1)  # two rungs down, in the middle of an epoch
    backoff.epoch_finished()
    assert not backoff.climb_due(at_epoch_start=True)  # the failing epoch was not clean
    backoff.epoch_started()
    backoff.epoch_finished()
    assert backoff.climb_due(at_epoch_start=True)
    assert backoff.rung_up() == (4, 1)
    backoff.moved_to(4, 1)
    backoff.epoch_started()
    backoff.failed()  # an incident in the epoch: no climb after it
    backoff.epoch_finished()
    assert not backoff.climb_due(at_epoch_start=True)
    backoff.epoch_started()
    backoff.epoch_finished()
    assert backoff.rung_up() == (4, 2)
    backoff.moved_to(4, 2)
    assert not backoff.lowered and backoff.rung_up() is None


def test_backoff_climbs_mid_epoch_after_enough_healthy_batches(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from loaderdoctor.supervise import heal_policy

    monkeypatch.setattr(heal_policy, "CLIMB_AFTER_BATCHES", 3)
    backoff = Backoff(2, 1, base_workers=2, base_prefetch=2)
    for _ in range(2):
        backoff.delivered()
    assert not backoff.climb_due(at_epoch_start=False)
    backoff.delivered()
    assert backoff.climb_due(at_epoch_start=False)


# Who is replaced: one worker, or the whole pool. cause, situation changes, alone?
WHO_TABLE = [
    ("native-crash", {}, True),  # respawn, no culprit
    ("native-crash", {"culprit": 3}, True),  # probe: the replacement starts meanwhile
    ("native-crash", {"culprit": 3, "probe_failed_again": True}, True),  # quarantine
    ("worker-hang", {"kind": "hang", "culprit": 7}, True),
    # an environmental death at the floor: the one worker is replaced
    ("killed-by-signal", {"prefetch_factor": 1, "num_workers": 1}, True),
    # a back-off is a pool of another shape
    ("oom-killed", {"culprit": 3, "probe_failed_again": False}, False),
    ("oom-killed", {"prefetch_factor": 1, "num_workers": 2}, False),
    # a batch that could not be sent: its worker is alive
    ("batch-lost", {"kind": "exception", "stage": "send"}, False),
    ("fd-exhausted", {"kind": "exception"}, False),
    # a death under the old strategy: every worker restarts under the new one
    ("fd-exhausted", {"sharing_strategy": "file_descriptor"}, False),
    # a hang re-tried alone with the pool stopped: the pool is rebuilt, whatever follows
    ("worker-hang", {"kind": "hang", "culprit": 7, "isolated_probe": True}, False),
    (
        "worker-hang",
        {"kind": "hang", "culprit": 7, "isolated_probe": True, "probe_failed_again": True},
        False,
    ),
    # streams and failures that are raised
    ("native-crash", {"iterable": True}, True),  # a stream worker is replaced alone too
    ("native-crash", {"heal": False}, False),
    ("internal-error", {}, False),
]


@pytest.mark.parametrize(("cause", "changes", "alone"), WHO_TABLE)
def test_replaces_one_worker(cause: str, changes: dict, alone: bool) -> None:
    at = replace(BASE, **changes)
    action = HealPolicy().decide(verdict(cause), at)
    assert replaces_one_worker(action, at) is alone


def test_the_fork_fallback_names_its_start_method() -> None:
    at = replace(BASE, kind="start", fork_fallback=True)
    assert HealPolicy().decide(verdict("unpicklable"), at).start_method == "fork"
    assert HealPolicy().decide(verdict("process-limit"), at).start_method is None


def test_the_sharing_switch_is_in_the_action_once() -> None:
    at = replace(BASE, kind="exception", sharing_strategy="file_descriptor")
    switch = HealPolicy().decide(verdict("fd-exhausted"), at)
    assert (switch.sharing_strategy, switch.note) == ("file_system", sharing.SWITCH_NOTE)
    after = HealPolicy().decide(
        verdict("fd-exhausted"), replace(at, sharing_strategy="file_system")
    )
    assert after.sharing_strategy is None
    other = HealPolicy().decide(verdict("shm-exhausted"), at)
    assert other.sharing_strategy is None


def test_a_failed_probe_says_so_in_the_action() -> None:
    at = replace(BASE, culprit=3, probe_error="RuntimeError: boom")
    action = HealPolicy().decide(verdict("native-crash"), at)
    assert action.note == (
        "sample 3 could not be re-tried alone (RuntimeError: boom): "
        "not quarantined, it loads again in the respawned worker"
    )


def test_odd_samples_a_good_structure_decides_and_outside_samples_vote() -> None:
    import torch

    from loaderdoctor.supervise.worker.sample_policy import odd_samples

    short, long = ("Tensor", (1,), "torch.int64"), ("Tensor", (2,), "torch.int64")
    batch = [torch.tensor([3]), torch.tensor([0]), torch.tensor([4]), torch.tensor([1, 1])]
    indices = [3, 0, 4, 1]
    assert odd_samples(batch, indices) == [1]  # the majority
    # samples outside the batch are votes beside the batch's own: one of each changes nothing,
    # two ragged ones make a tie (undecidable), three outvote the batch
    assert odd_samples(batch, indices, votes={long: 1, short: 1}) == [1]
    assert odd_samples(batch, indices, votes={long: 2}) == []
    assert odd_samples(batch, indices, votes={long: 3}) == [3, 0, 4]
    # a structure known good (from a batch that collated) decides, whatever the numbers
    assert odd_samples(batch, indices, reference=long) == [3, 0, 4]
    tie = [torch.tensor([3]), torch.tensor([0]), torch.tensor([4, 4]), torch.tensor([1, 1])]
    assert odd_samples(tie, indices) == []
    assert odd_samples(tie, indices, votes={short: 1}) == [4, 1]


@pytest.mark.parametrize("cause", sorted(catalog.CAUSES))
def test_a_start_failure_loads_in_process_exactly_when_its_row_says_so(cause: str) -> None:
    action = HealPolicy().decide(verdict(cause), replace(BASE, kind="start"))
    if catalog.START_FAILURE in (catalog.CAUSES[cause].heals or ()):
        assert action == heal_policy.Action(
            B, 0, 1, "the epoch loads in the main process instead (num_workers=0)"
        )
    else:
        assert action == heal_policy.Action(R, 4, 2)


def test_a_new_rows_heals_decides_how_its_start_failure_heals(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The set is built from the rows (as heal_policy builds it at import), never listed apart:
    # a row that declares start-failure falls back to loading in the main process, one that
    # does not is raised.
    for name, heals in (("synthetic-start", {catalog.START_FAILURE}), ("synthetic-other", set())):
        monkeypatch.setitem(
            catalog.CAUSES,
            name,
            catalog.Cause(name, name, "", ("fix it",), heals=frozenset(heals)),
        )
    built = heal_policy.causes_that(catalog.START_FAILURE)
    assert {"synthetic-start", "unpicklable"} <= built and "synthetic-other" not in built
    monkeypatch.setattr(heal_policy, "START_FAILURES", built)
    start = replace(BASE, kind="start")
    assert HealPolicy().decide(verdict("synthetic-start"), start).kind is B
    assert HealPolicy().decide(verdict("synthetic-other"), start).kind is R


def test_healing_stopped_at_the_deaths_limit_names_it() -> None:
    at = replace(BASE, deaths_in_a_row=3, max_deaths_in_a_row=3, oom_ruled_out=True)
    action = HealPolicy().decide(verdict("killed-by-signal"), at)
    assert (action.kind, action.stops_healing) == (R, True)
    assert action.note == (
        "healing stopped: 4 worker deaths in a row with no batch delivered between them and no "
        "sample to blame (max_deaths_in_a_row=3: DataLoader(max_deaths_in_a_row=N), or "
        "loaderdoctor run --max-deaths-in-a-row N, allows more)"
    )


def test_only_the_machine_holds_a_pool_back() -> None:
    assert heal_policy.holds_back(verdict("oom-killed"), BASE)
    assert heal_policy.holds_back(verdict("killed-by-signal"), BASE)
    assert not heal_policy.holds_back(
        verdict("killed-by-signal"), replace(BASE, oom_ruled_out=True)
    )
    assert not heal_policy.holds_back(verdict("native-crash"), BASE)
