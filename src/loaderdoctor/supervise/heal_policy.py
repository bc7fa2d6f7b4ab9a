"""What healing does about a failure: a pure decision, from the verdict and the loader's situation.

``HealPolicy.decide`` takes data and returns data (an ``Action``); the iterator carries it out. It
never touches a process, so every rule is tested from a table (``tests/test_heal_policy.py``).
The back-off ladder is here too: down one rung after an environmental failure, back up one rung
after a healthy stretch, never below one worker process after a process-killing cause unless the
user allowed in-process loading.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from typing import Protocol

from loaderdoctor.forensics import catalog
from loaderdoctor.forensics.evidence import Diagnosis
from loaderdoctor.supervise import sharing


def causes_that(heal_kind: str) -> frozenset[str]:
    """The cause ids whose catalog row says ``heal_kind`` (``catalog.HEAL_KINDS``)."""
    return frozenset(c.id for c in catalog.CAUSES.values() if heal_kind in (c.heals or ()))


# Causes that say "this machine, now" rather than "this sample": back off rather than blame.
ENVIRONMENTAL = causes_that(catalog.ENVIRONMENTAL)
# Deaths whose sample in flight is worth re-trying alone before it is quarantined.
SAMPLE_DEATHS = causes_that(catalog.SAMPLE_DEATH)
# Causes that kill a process: their sample must never run in the training process.
PROCESS_KILLING = causes_that(catalog.PROCESS_KILLING)
# Causes of workers that cannot start (pickling, an unguarded main script, the process limit):
# loading moves to the main process for the rest of the loader's life. Any other start failure
# is the user's to see, as under stock torch.
START_FAILURES = causes_that(catalog.START_FAILURE)
# Worker deaths (and hangs) in a row with no batch delivered between them and no sample found to
# blame (a death whose sample then failed again alone quarantines it, and is bounded by what the
# samples did: ``max_skipped``): past this many, healing stops (``max_deaths_in_a_row``).
MAX_DEATHS_IN_A_ROW = 8
DEATHS_LIMIT_KEYWORD = "max_deaths_in_a_row"
IN_PROCESS_NOTE = "the epoch loads in the main process instead (num_workers=0)"
NOT_EXACT_NOTE = (
    "not healed: this loader's state cannot resume a new pool with every healthy sample once "
    "(torchdata's StatefulDataLoader with in_order=False)"
)
STREAM_INTERNAL_NOTE = (
    "not handed to plain torch: items of this loader's streams were delivered already, and plain "
    "torch would start every stream again from its first item (delivering them twice)"
)
# Start failures only spawn and forkserver have (what they must pickle, the main script they
# re-run): forked workers start where those cannot, so samples still load outside the training
# process. The process limit is not among them: no start method gets a process past it.
SPAWN_ONLY = frozenset({"unpicklable", "main-guard-missing"})
FORK_NOTE = (
    "the epoch loads in {workers} forked worker process(es) instead "
    "(multiprocessing_context='fork', which pickles nothing and re-runs no script): "
    "isolated from the training process"
)
COLLATE_TOGETHER_NOTE = (
    "not healed: this batch killed its worker in collate_fn twice, and each of its samples "
    "collates fine alone, so they fail only together (their shapes or types): nothing is "
    "quarantined; a collate_fn that handles them is the fix"
)
OUTSIDE_KILL_NOTE = (
    "killed from outside (no OOM kill in the kernel log or the cgroup counters): respawned, "
    "the pool keeps its size"
)
# A rung is climbed back after this many batches delivered without an environmental failure, or
# at the start of an epoch when the whole previous epoch was healthy, whichever comes first.
CLIMB_AFTER_BATCHES = 1000


class ActionKind(enum.Enum):
    RAISE = "raised"  # hand the failure to the user
    PROBE = "probe"  # re-try the sample in flight alone in a fresh worker, then decide again
    RESPAWN = (
        "respawned"  # the dead worker replaced (alone: ``replaces_one_worker``), owed sent again
    )
    QUARANTINE = "quarantined"  # the sample in flight is bad: remember it, then respawn
    BACK_OFF = "backed-off"  # the machine is short: one rung down the ladder, then respawn
    FALL_BACK = "fell-back"  # loaderdoctor itself failed: plain torch loading takes over


@dataclass(frozen=True)
class Action:
    kind: ActionKind
    num_workers: int
    prefetch_factor: int
    note: str = ""
    # torch's sharing strategy to switch to before the pool restarts (None: keep it)
    sharing_strategy: str | None = None
    # The start method the pool restarts with (None: the loader's own)
    start_method: str | None = None
    # The pool is stopped before the culprit is re-tried alone (nothing it holds contends with
    # the re-try), so it is rebuilt, never resumed with one worker replaced.
    pool_stopped: bool = False
    # Healing stops here at a limit (``note`` names it, its value and its keyword): the raise
    # is a ``HealingStoppedError``, not the failure's own.
    stops_healing: bool = False
    # The control (a sample loaded whole earlier, re-tried the same way) failed too: the failure
    # is what the workers share, not the sample's; nothing is quarantined
    shared: bool = False


@dataclass(frozen=True)
class Situation:
    """What the iterator knows when a failure arrives, besides the verdict."""

    heal: bool
    iterable: bool  # a stream: its workers resume their streams (``culprit`` is a position)
    # Deaths and hangs since the last delivered batch that blamed no sample (this one not
    # counted); ``max_deaths_in_a_row`` is the user's bound on them
    deaths_in_a_row: int
    num_workers: int
    prefetch_factor: int
    kind: str  # Evidence.kind: death, exception, hang, start
    stage: str | None = None
    reached_worker_init: bool | None = None
    culprit: object = None  # the sample in flight
    probe_failed_again: bool | None = None  # None: not probed yet
    probe_error: str | None = None  # the probe itself failed, so it could not tell
    # The culprit is quarantined already: a worker that did not know it yet fetched it
    culprit_quarantined: bool = False
    in_process_allowed: bool = False  # the user's allow_in_process
    # The loader's own state records num_workers (torchdata's ``StatefulDataLoader``: a state_dict
    # taken later must load into the same pool shape), and only a pool resumed from that state
    # can go on: no fewer workers, no plain-torch fall-back.
    workers_fixed: bool = False
    # A pool stopped now can be resumed with every healthy sample once (not so from torchdata's
    # state with in_order=False: batches arrive out of order, and its snapshots lag behind).
    resumes_exactly: bool = True
    sharing_strategy: str | None = None  # torch's, in this process (None: not known)
    # Workers that cannot start under the loader's start method may be forked instead (Linux,
    # and the loader's method is not fork already)
    fork_fallback: bool = False
    # The caller can stop its pool before a re-try alone (``Action.pool_stopped``)
    isolated_probe: bool = False
    # Earlier deaths of this loader whose sample then loaded fine alone
    loaded_fine_alone_before: int = 0
    max_deaths_in_a_row: int = MAX_DEATHS_IN_A_ROW
    # A worker died collating this same batch before (and each sample collated fine alone)
    batch_died_in_collate_before: bool = False
    # A SIGKILL the kernel log and cgroup counters show was no OOM kill: not the machine's
    # memory, so no reason to shrink the pool (``forensics.rules.oom_ruled_out``)
    oom_ruled_out: bool = False
    # Why no worker of this loader can be replaced or its pool resumed (a library that
    # coordinates its workers itself: ``coordinated``): a death is raised at once, saying so
    not_resumable: str | None = None
    # Items of a stream were delivered this epoch (plain torch would deliver them again)
    stream_delivered: bool = False
    # A worker's exception that arrived in its batch's place (``kind`` "exception"): healing
    # loads the batch again elsewhere only where the machine was short or ours failed
    received: bool = False


def holds_back(diagnosis: Diagnosis, at: Situation) -> bool:
    """A failure that says the machine is short now (memory, /dev/shm, descriptors): it backs
    the pool off, and holds a backed-off pool from climbing back. A death the kernel shows was
    no OOM kill (an outside SIGKILL) says nothing about the machine."""
    if diagnosis.cause not in ENVIRONMENTAL:
        return False
    return not (diagnosis.cause == "killed-by-signal" and at.oom_ruled_out)


def process_killing(cause: str, kind: str) -> bool:
    """A cause that killed a process: a sample must then never run in the training process."""
    return kind in ("death", "hang") or cause in PROCESS_KILLING


def memory_suspect(diagnosis: Diagnosis) -> bool:
    """A death the OOM killer may have caused (its verdict, or a SIGKILL whose cause could not be
    read): the sample is re-tried alone before the dead worker's replacement starts, so that the
    two never grow at once beside the training process."""
    return diagnosis.cause == "oom-killed" or diagnosis.signal == "SIGKILL"


def ladder(num_workers: int, prefetch_factor: int, floor: int) -> list[tuple[int, int]]:
    """The rungs from the user's settings down to ``floor`` workers: prefetch 1, then halving."""
    rungs = [(num_workers, prefetch_factor)]
    if prefetch_factor > 1:
        rungs.append((num_workers, 1))
    workers = num_workers
    while workers > max(floor, 1):
        workers = max(workers // 2, 1)
        rungs.append((workers, 1))
    if floor == 0 and num_workers > 0:
        rungs.append((0, 1))
    return rungs


def step_down(num_workers: int, prefetch_factor: int, floor: int) -> tuple[int, int] | None:
    """One rung below ``(num_workers, prefetch_factor)``; None at the floor."""
    if prefetch_factor > 1:
        return num_workers, 1
    if num_workers > max(floor, 1):
        return max(num_workers // 2, 1), 1
    if num_workers == 1 and floor == 0:
        return 0, 1
    return None


def replaces_one_worker(action: Action, at: Situation) -> bool:
    """Whether ``action`` is carried out by replacing the failed worker alone.

    So for a dead or hung worker when the pool keeps its shape (a stream's replacement resumes
    that worker's stream alone); a back-off (prefetch 1, fewer workers, in-process) is a
    different pool, so it gets a fresh one. A probe counts: the replacement starts while the
    sample in flight is re-tried alone, and serves whichever of respawn or quarantine follows.
    """
    return (
        action.kind in (ActionKind.RESPAWN, ActionKind.QUARANTINE, ActionKind.PROBE)
        and action.sharing_strategy is None  # every worker must start under the new strategy
        and not action.pool_stopped
        and (action.num_workers, action.prefetch_factor) == (at.num_workers, at.prefetch_factor)
        and at.kind in ("death", "hang")
    )


def owed_again(diagnosis: Diagnosis) -> bool:
    """A worker's exception after which its batch is still owed to the user (healing loads it
    again elsewhere): the machine was short, or loaderdoctor's own machinery failed."""
    return diagnosis.cause in ENVIRONMENTAL or diagnosis.cause == "internal-error"


@dataclass(frozen=True)
class Retry:
    """A re-try the policy needs before it decides: ``culprit`` alone, in a fresh worker."""

    culprit: object
    collate: bool  # collated alone too (the worker died in collate_fn)
    # Stop the pool first (``Action.pool_stopped``): nothing it holds contends with the re-try
    stop_pool: bool
    # Start the failed worker's replacement first, so that its start-up overlaps the re-try
    # (not for a death the OOM killer may have caused: the two would grow at once)
    replace_first: bool


@dataclass(frozen=True)
class Retried:
    """What a re-try showed: the culprit failed again alone (True), loaded fine (False), or why
    the re-try could not tell (a string, never taken for the sample's failure); and the control
    that failed too (None when it loaded fine, or there was none to re-try). Before any sample
    loaded whole, the controls are samples not tried yet: then every one re-tried failed too.
    """

    failed_again: bool | str
    control_failed: object | None = None
    also_failed: tuple[object, ...] = ()  # the other untried controls that failed
    loaded_before: bool = True  # the control had loaded whole earlier in this run


class Retrier(Protocol):
    """What the caller re-tries for the policy: processes and I/O stay on the caller's side."""

    def alone(self, retry: Retry) -> Retried:
        """Re-try the culprit alone and, where it failed again (before it is blamed), a
        control the same way: a sample loaded whole earlier in this run."""


@dataclass(frozen=True)
class Decision:
    """The policy's whole answer to one failure: what to do, and what the caller needs to know
    to carry it out (each from a predicate of this module, asked nowhere else)."""

    action: Action
    # Carried out by replacing the failed worker alone (``replaces_one_worker``)
    alone: bool
    # The replacement starts before anything else is done (its start-up overlaps a re-try)
    replace_early: bool
    # A death the OOM killer may have caused (``memory_suspect``): replaced only once decided
    replace_late: bool
    # The machine is short (``holds_back``): a backed-off pool is held from climbing back
    holds_back: bool
    # A death or hang that blamed no sample: one more toward ``max_deaths_in_a_row``
    counts_death: bool
    # The culprit failed again alone and no control failed too: the verdict names the sample
    reproduced: bool = False


class HealPolicy:
    """Decides what to do about one failure. Pure: no processes, no I/O, no clock."""

    def plan(self, diagnosis: Diagnosis, at: Situation, retrier: Retrier | None = None) -> Decision:
        """The one consultation per failure: the action, with the re-try alone it needs made
        through ``retrier`` (without one, a probe is the answer), and how to carry it out."""
        owed = not at.received or (
            owed_again(diagnosis) and (at.heal or diagnosis.cause == "internal-error")
        )
        if not owed:  # a worker's exception, the user's to see, as under stock torch
            first = Action(ActionKind.RAISE, at.num_workers, at.prefetch_factor)
        else:
            first = self.decide(diagnosis, at)
        probing = first.kind is ActionKind.PROBE
        suspect = memory_suspect(diagnosis)
        early = replaces_one_worker(first, at) and not (probing and suspect)
        action, reproduced = first, False
        if probing and retrier is not None:
            retry = Retry(at.culprit, at.stage == "collate", first.pool_stopped, early)
            action, reproduced = self._retried(diagnosis, at, retrier, retry)
        return Decision(
            action,
            alone=replaces_one_worker(action, at),
            replace_early=early,
            replace_late=suspect,
            holds_back=holds_back(diagnosis, at),
            counts_death=at.kind in ("death", "hang") and action.kind is not ActionKind.QUARANTINE,
            reproduced=reproduced,
        )

    def _retried(
        self, diagnosis: Diagnosis, at: Situation, retrier: Retrier, retry: Retry
    ) -> tuple[Action, bool]:
        """Decide again on what the re-try alone showed; before a sample is blamed, a control
        (a sample loaded whole earlier, re-tried the same way) that fails too shows the failure is
        what the workers share: healing stops, nothing is quarantined. (A probe's culprit
        that failed again alone is always quarantined, so the control is asked with the
        re-try, in one call back.)"""
        retried = retrier.alone(retry)
        outcome = retried.failed_again
        if isinstance(outcome, str):
            return self.decide(diagnosis, replace(at, probe_error=outcome)), False
        action = self.decide(diagnosis, replace(at, probe_failed_again=outcome))
        if not (outcome and action.kind is ActionKind.QUARANTINE):
            return action, False
        if retried.control_failed is None:
            return replace(action, note=""), True
        return _shared_control(at, retry.culprit, retried), False

    def decide(self, diagnosis: Diagnosis, at: Situation) -> Action:
        action = self._decide(diagnosis, at)
        if at.not_resumable is not None and action.kind is not ActionKind.RAISE:
            note = f"not healed: {at.not_resumable}"
            return Action(ActionKind.RAISE, at.num_workers, at.prefetch_factor, note)
        if not at.resumes_exactly and action.kind is not ActionKind.RAISE:
            return Action(ActionKind.RAISE, at.num_workers, at.prefetch_factor, NOT_EXACT_NOTE)
        action = _within_fixed_workers(action, at) if at.workers_fixed else action
        return _within_deaths_in_a_row(action, at)

    def _decide(self, diagnosis: Diagnosis, at: Situation) -> Action:
        keep = Action(ActionKind.RESPAWN, at.num_workers, at.prefetch_factor)
        raise_it = replace(keep, kind=ActionKind.RAISE)
        cause = diagnosis.cause
        if cause == "internal-error" and at.kind != "start":
            return self._internal(at, keep)
        if not at.heal:
            return raise_it
        if at.kind == "start":  # a stream too: nothing of it was read yet
            return self._start(diagnosis, at, raise_it)
        if at.iterable:
            return self._stream(diagnosis, at, keep)
        if cause == "internal-error":
            return replace(keep, kind=ActionKind.FALL_BACK)
        if cause == "fd-exhausted" and at.sharing_strategy == sharing.FILE_DESCRIPTOR:
            # torch's own fix first (its message names it): tensors cross as named files, which
            # hold no descriptor; only a second failure under it backs off.
            return replace(keep, sharing_strategy=sharing.FILE_SYSTEM, note=sharing.SWITCH_NOTE)
        if at.kind == "exception" and at.stage == "send":
            # A batch that cannot be sent fails again from any worker: load it in-process.
            return Action(
                ActionKind.BACK_OFF, 0, 1, "the rest of the epoch loads in the main process"
            )
        if (
            at.kind == "death"
            and at.reached_worker_init is False
            and not killed_while_starting(cause)
        ):
            return raise_it  # the workers cannot start at all: nothing to respawn into
        # (An OOM kill while starting, spawned workers each importing torch again: fewer fit; a
        # worker killed from outside while it started is replaced as any other.)
        if at.kind == "exception":
            # Out of shared memory or descriptors: the batch is still owed; back off. Any other
            # exception is the user's to see (sample errors heal inside the workers).
            return self._back_off(diagnosis, at, "") if cause in ENVIRONMENTAL else raise_it
        if at.culprit_quarantined and (cause == "worker-hang" or cause in SAMPLE_DEATHS):
            return replace(
                keep,
                kind=ActionKind.QUARANTINE,
                note=(
                    f"sample {at.culprit!r} is quarantined already: a worker that did not know "
                    "it yet fetched it (as a reference or a substitute)"
                ),
            )
        if cause == "worker-hang" and at.culprit is not None:
            if at.isolated_probe:
                return self._hang(at, keep)
            return replace(keep, kind=ActionKind.QUARANTINE)
        if cause in SAMPLE_DEATHS and at.culprit is not None:
            return self._sample_death(diagnosis, at, keep)
        if at.stage == "collate" and at.batch_died_in_collate_before:
            # No sample to quarantine: they fail only together, and would fail so again.
            return replace(raise_it, note=COLLATE_TOGETHER_NOTE)
        if holds_back(diagnosis, at):
            return self._back_off(diagnosis, at, "")
        if cause == "killed-by-signal" and at.oom_ruled_out:
            return replace(keep, note=OUTSIDE_KILL_NOTE)
        return keep

    def _start(self, diagnosis: Diagnosis, at: Situation, raise_it: Action) -> Action:
        """Workers that could not start, where the cause's catalog row says healing goes on
        (``start-failure``): forked workers where only spawn's pickling or re-run script stood
        in the way, so a sample that kills its process still cannot kill the training; else the
        main process. Any other start failure the user sees."""
        if diagnosis.cause not in START_FAILURES:
            return raise_it
        if diagnosis.cause in SPAWN_ONLY and at.fork_fallback and at.num_workers > 0:
            return Action(
                ActionKind.BACK_OFF,
                at.num_workers,
                at.prefetch_factor,
                FORK_NOTE.format(workers=at.num_workers),
                start_method="fork",
            )
        return Action(ActionKind.BACK_OFF, 0, 1, IN_PROCESS_NOTE)

    def _sample_death(self, diagnosis: Diagnosis, at: Situation, keep: Action) -> Action:
        """A death at a known sample: re-try it alone, then quarantine it if it fails again."""
        if at.probe_error is not None:
            return replace(
                keep,
                note=(
                    f"sample {at.culprit!r} could not be re-tried alone ({at.probe_error}): "
                    "not quarantined, it loads again in the respawned worker"
                ),
            )
        if at.probe_failed_again is None:
            return replace(keep, kind=ActionKind.PROBE)
        if at.probe_failed_again:
            return replace(
                keep,
                kind=ActionKind.QUARANTINE,
                note=f"sample {at.culprit!r} failed again alone in a fresh worker",
            )
        if holds_back(diagnosis, at):
            return self._back_off(
                diagnosis,
                at,
                f"sample {at.culprit!r} loaded fine alone: the machine, not the sample",
            )
        if diagnosis.cause == "killed-by-signal" and at.oom_ruled_out:
            return replace(
                keep, note=f"sample {at.culprit!r} loaded fine alone; {OUTSIDE_KILL_NOTE}"
            )
        if at.loaded_fine_alone_before and at.num_workers > 1:
            return self._fewer_workers(
                at,
                f"sample {at.culprit!r} loaded fine alone, as another dead worker's sample did "
                "before: the pool, not the samples (workers contending for memory or a "
                "resource)",
            )
        return replace(keep, note=f"sample {at.culprit!r} loaded fine alone: not reproducible")

    def _hang(self, at: Situation, keep: Action) -> Action:
        """A worker stuck on a sample: re-try the sample alone with the pool stopped (a slot,
        a lock or memory the other workers hold cannot keep it waiting then). Stuck again
        alone: the sample's fault, quarantined. Fine alone: the pool's, so fewer workers; the
        sample is owed still and loads in the smaller pool."""
        stopped = replace(keep, pool_stopped=True)
        if at.probe_error is not None:
            return replace(
                stopped,
                note=(
                    f"sample {at.culprit!r} could not be re-tried alone ({at.probe_error}): "
                    "not quarantined, it loads again in the new pool"
                ),
            )
        if at.probe_failed_again is None:
            return replace(stopped, kind=ActionKind.PROBE)
        if at.probe_failed_again:
            return replace(
                stopped,
                kind=ActionKind.QUARANTINE,
                note=f"sample {at.culprit!r} got stuck again alone in a fresh worker",
            )
        if at.num_workers <= 1:
            return replace(
                stopped,
                note=f"sample {at.culprit!r} loaded fine alone in a fresh worker: not reproducible",
            )
        return self._fewer_workers(
            at,
            f"sample {at.culprit!r} loaded fine alone with the pool stopped: the pool, not the "
            "sample (workers contending for a resource, a lock or memory)",
        )

    def _fewer_workers(self, at: Situation, note: str) -> Action:
        """Half the workers (at least one), prefetch 1: a rung of the ladder, skipping the
        prefetch-only rung, which leaves as many workers contending."""
        return Action(ActionKind.BACK_OFF, max(at.num_workers // 2, 1), 1, note, pool_stopped=True)

    def _internal(self, at: Situation, keep: Action) -> Action:
        """A bug of ours is never a verdict on the job, healing or not: plain torch loading
        takes over (the owed batches, then the rest of the epoch). A stream only while none of
        it was delivered: plain torch starts every stream again from its first item."""
        if at.iterable and at.stream_delivered:
            return replace(keep, kind=ActionKind.RAISE, note=STREAM_INTERNAL_NOTE)
        return replace(keep, kind=ActionKind.FALL_BACK)

    def _stream(self, diagnosis: Diagnosis, at: Situation, keep: Action) -> Action:
        """A stream (IterableDataset): the dead worker's replacement resumes its stream, skipping
        the item in flight; where the pool must be rebuilt, every worker resumes its own in a pool
        of the same size (fewer workers would re-shard the stream).

        No probe (an item of a stream cannot be loaded alone) and no plain-torch fall-back (it
        would start every stream again from its first item).
        """
        raise_it = replace(keep, kind=ActionKind.RAISE)
        if at.kind not in ("death", "hang"):
            return raise_it
        if at.kind == "death" and at.reached_worker_init is False:
            if not killed_while_starting(diagnosis.cause):
                return raise_it
        if diagnosis.cause == "internal-error":
            return raise_it
        return keep

    def _back_off(self, diagnosis: Diagnosis, at: Situation, note: str) -> Action:
        floor = 1 if process_killing(diagnosis.cause, at.kind) and not at.in_process_allowed else 0
        lower = step_down(at.num_workers, at.prefetch_factor, floor)
        if lower is None:
            # At the floor already: keep one worker process (a process-killing sample must not
            # take the training process with it) and try again.
            extra = "at the lowest safe setting already (allow_in_process=True to go lower)"
            return Action(
                ActionKind.RESPAWN,
                at.num_workers,
                at.prefetch_factor,
                f"{note}; {extra}" if note else extra,
            )
        return Action(ActionKind.BACK_OFF, lower[0], lower[1], note)


def killed_while_starting(cause: str) -> bool:
    """A death before the worker reached its init that is no start failure: the OOM killer or
    an outside signal took a worker that was starting, which a replacement can survive."""
    return cause in ("oom-killed", "killed-by-signal")


def _within_deaths_in_a_row(action: Action, at: Situation) -> Action:
    """Healing stops, and says so, once deaths that blamed no sample come one after another
    past the user's bound with no batch delivered between: it would only start workers that
    die. A probe decides first (its sample may be quarantined, which is the sample's count:
    ``max_skipped`` bounds those)."""
    if at.kind not in ("death", "hang") or action.kind in (
        ActionKind.RAISE,
        ActionKind.PROBE,
        ActionKind.QUARANTINE,
        ActionKind.FALL_BACK,
    ):
        return action
    if at.deaths_in_a_row < at.max_deaths_in_a_row:
        return action
    return Action(
        ActionKind.RAISE,
        at.num_workers,
        at.prefetch_factor,
        f"healing stopped: {at.deaths_in_a_row + 1} worker deaths in a row with no batch "
        f"delivered between them and no sample to blame ({DEATHS_LIMIT_KEYWORD}="
        f"{at.max_deaths_in_a_row}: DataLoader({DEATHS_LIMIT_KEYWORD}=N), or loaderdoctor run "
        "--max-deaths-in-a-row N, allows more)",
        stops_healing=True,
    )


def _within_fixed_workers(action: Action, at: Situation) -> Action:
    """What is left of ``action`` when the loader's state fixes num_workers: a back-off keeps
    the workers (and lowers prefetch_factor only), and the plain-torch fall-back is a raise."""
    if action.kind is ActionKind.FALL_BACK:
        return replace(action, kind=ActionKind.RAISE)
    if action.kind is not ActionKind.BACK_OFF or action.num_workers == at.num_workers:
        return action
    if at.kind == "start":  # workers that cannot start: in-process loading is the only way
        return Action(ActionKind.RAISE, at.num_workers, at.prefetch_factor)
    return Action(
        ActionKind.RESPAWN,
        at.num_workers,
        at.prefetch_factor,
        f"the loader's state_dict records num_workers={at.num_workers}: respawned instead of "
        "backing off",
    )


def _shared_control(at: Situation, culprit: object, retried: Retried) -> Action:
    if retried.loaded_before:
        controls = (
            f"did sample {retried.control_failed!r}, loaded whole earlier in this run, re-tried "
            "the same way (the control)"
        )
    else:
        samples = (retried.control_failed, *retried.also_failed)
        named = " and ".join(f"{sample!r}" for sample in samples)
        controls = (
            f"did samples {named}, none loaded whole yet in this run and each re-tried the "
            "same way (the controls)"
        )
    return Action(
        ActionKind.RAISE,
        at.num_workers,
        at.prefetch_factor,
        f"healing stopped: sample {culprit!r} failed again alone in a fresh worker, and so "
        f"{controls}: the failure is not the sample's but what the workers share (state "
        "inherited from the main process, a lock or semaphore a killed worker held, the "
        "machine); nothing is quarantined",
        stops_healing=True,
        shared=True,
    )


POLICY = HealPolicy()  # stateless: the one instance every caller asks


@dataclass
class Backoff:
    """Where the loader stands on its ladder, and how long it has been healthy there."""

    num_workers: int
    prefetch_factor: int
    base_workers: int
    base_prefetch: int
    healthy_batches: int = 0
    clean_epoch_done: bool = False  # the last epoch that finished had no failure
    this_epoch_clean: bool = False

    @property
    def lowered(self) -> bool:
        return (self.num_workers, self.prefetch_factor) != (self.base_workers, self.base_prefetch)

    def moved_to(self, num_workers: int, prefetch_factor: int) -> None:
        self.num_workers, self.prefetch_factor = num_workers, prefetch_factor
        self.healthy_batches = 0
        self.clean_epoch_done = self.this_epoch_clean = False

    def failed(self) -> None:
        self.healthy_batches = 0
        self.this_epoch_clean = False

    def delivered(self) -> None:
        self.healthy_batches += 1

    def epoch_started(self) -> None:
        self.this_epoch_clean = True

    def epoch_finished(self) -> None:
        self.clean_epoch_done = self.this_epoch_clean

    def climb_due(self, at_epoch_start: bool) -> bool:
        if not self.lowered:
            return False
        if self.healthy_batches >= CLIMB_AFTER_BATCHES:
            return True
        return at_epoch_start and self.clean_epoch_done

    def rung_up(self) -> tuple[int, int] | None:
        """The rung above the current one (None at the user's own settings)."""
        if not self.lowered:
            return None
        rungs = ladder(self.base_workers, self.base_prefetch, 0)
        here = (self.num_workers, self.prefetch_factor)
        if here in rungs and rungs.index(here) > 0:
            return rungs[rungs.index(here) - 1]
        return self.base_workers, self.base_prefetch


__all__ = [
    "CLIMB_AFTER_BATCHES",
    "DEATHS_LIMIT_KEYWORD",
    "ENVIRONMENTAL",
    "MAX_DEATHS_IN_A_ROW",
    "OUTSIDE_KILL_NOTE",
    "POLICY",
    "SAMPLE_DEATHS",
    "SPAWN_ONLY",
    "Action",
    "ActionKind",
    "Backoff",
    "Decision",
    "HealPolicy",
    "Retried",
    "Retrier",
    "Retry",
    "Situation",
    "holds_back",
    "killed_while_starting",
    "ladder",
    "memory_suspect",
    "process_killing",
    "replaces_one_worker",
    "step_down",
]
