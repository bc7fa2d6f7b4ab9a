"""Fetch every index through the user's code in supervised, healing workers; collect the verdicts.

The scan goes in rounds: each round is one supervised loader over the indices still to scan. The
loader heals what goes wrong (an exception is skipped, a dead or hung worker is replaced and its
culprit re-tried alone), and every failure names its index. When the loader gives up (too many
deaths in a row) a fresh round goes on with the indices left.
"""

from __future__ import annotations

import functools
import os
import time
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from loaderdoctor.scan.findings import build_report
from loaderdoctor.scan.model import BadSample, ScanReport
from loaderdoctor.scan.shard import Shard
from loaderdoctor.scan.state import Loaded, ScanState, save_checkpoint
from loaderdoctor.scan.summary import SummarizingDataset, Summary

if TYPE_CHECKING:
    from loaderdoctor.scan.memcap import MemoryCap

MAX_ROUNDS = 1000
# A worker death healed without quarantining its sample (it loaded alone, or the re-try could
# not tell): the sample is flaky if it loaded in the end.
FLAKY_ACTIONS = frozenset({"respawned", "backed-off"})
MAX_EVIDENCE = 8
# Samples per message from a worker. One sample per message cost more than the decoding itself
# (562 samples/s against a 2,560/s limit of the cores): the queue, the pickling and the
# supervised iterator's bookkeeping are paid per message. The worker still records each sample in
# the flight recorder as it starts it, so a crash, an OOM kill or a hang (timed per sample) names
# exactly that sample, and a sample that raises is skipped alone inside its batch.
MAX_CHUNK = 32
CHUNKS_PER_WORKER = 8  # at least this many batches per worker: the last ones end close together

Progress = Callable[[int, int], None]  # (done, total)


def scan_dataset(
    dataset: Any,
    *,
    spec: str = "",
    num_workers: int = 2,
    timeout: float = 60.0,
    mem_limit: int | None = None,
    progress: Progress | None = None,
    checkpoint: str | os.PathLike[str] | None = None,
    checkpoint_every: float = 10.0,
    resume: ScanState | None = None,
    shard: Shard | None = None,
) -> ScanReport:
    """Fetch every index of ``dataset`` in isolated workers; every failure marks its index.

    ``mem_limit`` caps each worker's memory (bytes): a sample past it is OOM-killed and marked.
    ``checkpoint`` is saved every ``checkpoint_every`` seconds and when the scan is interrupted;
    ``resume`` is a checkpoint's state, whose samples are not fetched again. Under torchrun,
    ``shard`` says which indices are this rank's; rank 0's report covers every rank.
    """
    from loaderdoctor.scan import shard as sharding
    from loaderdoctor.supervise.samples import sample_file

    if not (hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__")):
        raise TypeError("scan needs a map-style dataset (__getitem__ and __len__)")
    shard = shard or Shard(0, 1)
    state = resume if resume is not None else ScanState(spec, len(dataset))
    resumed = len(state)  # every rank reads the same checkpoints: this counts them all
    joined = sharding.join(shard)  # after every rank checked for old checkpoints: saves start here
    saver = _Saver(checkpoint, checkpoint_every, state)
    cap = None
    try:
        cap = _memory_cap(mem_limit)
        state, seconds, shared = _scan_and_gather(
            dataset,
            state,
            shard,
            cap,
            saver,
            num_workers=num_workers,
            timeout=timeout,
            progress=progress,
        )
    finally:
        sharding.leave(joined)
        if cap is not None:
            cap.close()

    return build_report(
        state,
        functools.partial(sample_file, dataset),
        seconds=round(seconds, 3),
        num_workers=num_workers,
        timeout=timeout,
        mem_limit_bytes=mem_limit,
        mem_cap=cap.how if cap is not None else None,
        ranks=shard.world_size,
        resumed=resumed,
        shared_failure=shared,
    )


def scan_part(
    dataset: Any,
    indices: list[int],
    state: ScanState,
    *,
    num_workers: int,
    timeout: float,
    mem_limit: int | None,
) -> str | None:
    """Scan ``indices`` into ``state`` with the isolation of a whole scan (one Ray task's shard):
    its own workers and memory cap, every crash, OOM kill or hang naming its sample. Returns how
    the memory cap was enforced (None without a limit)."""
    cap = _memory_cap(mem_limit)
    try:
        _scan(
            dataset,
            [i for i in indices if not state.done(i)],
            state,
            len(indices),
            cap,
            num_workers=num_workers,
            timeout=timeout,
            progress=None,
            saver=_Saver(None, float("inf"), state),
        )
        return cap.how if cap is not None else None
    finally:
        if cap is not None:
            cap.close()


def _memory_cap(mem_limit: int | None) -> MemoryCap | None:
    """A cap on each worker's memory (a cgroup, else ``RLIMIT_AS``), or None without a limit."""
    if mem_limit is None:
        return None
    from loaderdoctor.scan.memcap import create_cap

    return create_cap(mem_limit)


def _scan_and_gather(
    dataset: Any,
    state: ScanState,
    shard: Shard,
    cap: Any,
    saver: _Saver,
    *,
    num_workers: int,
    timeout: float,
    progress: Progress | None,
) -> tuple[ScanState, float, str | None]:
    """Scan this rank's indices not scanned yet, then gather every rank's results and seconds;
    the third: why the scan stopped early (most samples failed alike), or None."""
    from loaderdoctor.scan import shard as sharding

    mine = shard.indices(len(dataset))
    start = time.perf_counter()
    try:
        shared = _scan(
            dataset,
            [i for i in mine if not state.done(i)],
            state,
            len(mine),
            cap,
            num_workers=num_workers,
            timeout=timeout,
            progress=progress,
            saver=saver,
        )
    finally:
        saver.save()  # also when interrupted: the samples scanned so far are kept
    state, seconds = sharding.gather(state, shard, time.perf_counter() - start)
    if shard.world_size > 1 and shard.is_leader:
        saver.state = state  # every rank's results, kept until the report is written
        saver.save()
    return state, seconds, shared


def _scan(
    dataset: Any,
    remaining: list[int],
    state: ScanState,
    shard_size: int,
    cap: Any,
    *,
    num_workers: int,
    timeout: float,
    progress: Progress | None,
    saver: _Saver,
) -> str | None:
    """Scan ``remaining`` in rounds; the sentence that stopped it when most samples failed the
    same way (the failure is shared), else None."""
    from loaderdoctor.supervise.samples import sample_file

    wrapped = SummarizingDataset(dataset, warm_up_limit_s=timeout / 4)
    done = shard_size - len(remaining)

    def loaded_one() -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, shard_size)
        saver.maybe_save()

    for _ in range(MAX_ROUNDS):
        if not remaining:
            return None
        failure = _scan_round(
            wrapped, remaining, state, cap, num_workers, timeout, on_loaded=loaded_one
        )
        if isinstance(failure, str):  # most samples fail alike: not theirs, the scan stops
            return failure
        before = len(remaining)
        remaining = [i for i in remaining if not state.done(i)]
        if failure is not None and len(remaining) == before:
            # no progress at all: the failure names no sample; blame the first one left
            index = remaining.pop(0)
            state.bad[index] = _bad_sample(
                index, failure.diagnosis or _unknown(str(failure)), dataset, cap
            )
        done = shard_size - len(remaining)
        if progress is not None:
            progress(done, shard_size)
    for index in remaining:  # only reachable past MAX_ROUNDS
        state.bad[index] = BadSample(
            index, "unknown", sample_file(dataset, index), "not scanned: too many failures"
        )
    return None


def _scan_round(
    wrapped: SummarizingDataset,
    indices: list[int],
    state: ScanState,
    cap: Any,
    num_workers: int,
    timeout: float,
    on_loaded: Callable[[], None],
) -> Any:
    """One healing loader over ``indices``: every result into ``state``; the error that ended
    it early (the loader gave up after too many deaths), or None."""
    from loaderdoctor.supervise import DataLoader, LoaderError
    from loaderdoctor.supervise.heal import HealWarning

    loader = DataLoader(
        wrapped,
        batch_size=chunk_size(len(indices), num_workers),
        sampler=indices,
        num_workers=num_workers,
        collate_fn=keep_summaries,
        worker_init_fn=cap,
        on_error="skip",
        heal=True,
        max_skipped=1.0,  # a scan names every bad sample, however many fail alike
        hang_timeout=timeout,
    )
    failure: LoaderError | str | None = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", HealWarning)  # every action is in loader.report
        try:
            for summaries in loader:
                for index, seconds, structure, peak_bytes, startup in summaries:
                    state.loaded[index] = Loaded(seconds, structure, peak_bytes)
                    if startup is not None:
                        state.startup.append(startup)
                    on_loaded()
                failure = _mostly_alike(loader.incidents, state)
                if failure is not None:
                    break
            else:  # (a batch of failures only is never delivered: judged at the end too)
                failure = _mostly_alike(loader.incidents, state)
        except LoaderError as error:
            failure = error
        finally:  # also on Ctrl-C: the verdicts so far go into the checkpoint
            incidents = loader.report.incidents
            diagnoses = [incident.diagnosis for incident in incidents]
            for incident in incidents:  # a death whose sample was not quarantined
                if incident.action in FLAKY_ACTIONS:
                    for index in incident.diagnosis.indices:
                        if isinstance(index, int):
                            death = _bad_sample(index, incident.diagnosis, wrapped.inner, cap)
                            state.deaths.setdefault(index, death)
            if isinstance(failure, LoaderError) and failure.diagnosis is not None:
                diagnoses.append(failure.diagnosis)
            for diagnosis in diagnoses:
                for index in diagnosis.indices:
                    if isinstance(index, int) and not state.done(index):
                        state.bad[index] = _bad_sample(index, diagnosis, wrapped.inner, cap)
    return failure


def _mostly_alike(incidents: Any, state: ScanState) -> str | None:
    """The sentence that stops a scan whose samples mostly fail the same way, or None."""
    from loaderdoctor.supervise.shared_failure import mostly_alike

    failures = [
        (_exception_type(incident.diagnosis), _message(incident.diagnosis))
        for incident in incidents
        if incident.action not in FLAKY_ACTIONS
    ]
    return mostly_alike(failures, len(state.loaded) + len(state.bad) + len(failures))


def _exception_type(diagnosis: Any) -> str:
    """A sample's failure as the signature's type: the exception's, else the cause's id."""
    message = _message(diagnosis)
    head = message.split(":", 1)[0]
    return head if head.isidentifier() else str(diagnosis.cause)


def keep_summaries(summaries: list[Summary]) -> list[Summary]:
    """The collate_fn: a batch's summaries are already small and plain; torch must not convert
    them (default_collate would turn the tuples' columns into tensors)."""
    return summaries


def chunk_size(samples: int, num_workers: int) -> int:
    """Samples per batch: up to ``MAX_CHUNK``, and ``CHUNKS_PER_WORKER`` batches per worker."""
    return max(1, min(MAX_CHUNK, samples // (max(num_workers, 1) * CHUNKS_PER_WORKER)))


def _bad_sample(index: int, diagnosis: Any, dataset: Any, cap: Any) -> BadSample:
    from loaderdoctor.supervise.samples import sample_file

    evidence = list(diagnosis.evidence)[:MAX_EVIDENCE]
    if cap is not None and diagnosis.cause == "oom-killed":
        evidence.append(f"memory cap per worker: {cap.limit_bytes / 2**20:.0f} MiB ({cap.how})")
    return BadSample(
        index=index,
        cause=diagnosis.cause,
        file=diagnosis.sample_file or sample_file(dataset, index),
        message=_message(diagnosis),
        evidence=evidence,
    )


class _Saver:
    """Saves the checkpoint at most every ``every`` seconds, and never slower than 10x a save."""

    def __init__(self, path: str | os.PathLike[str] | None, every: float, state: ScanState):
        self.path, self.every, self.state = path, every, state
        self.due = time.monotonic() + every

    def maybe_save(self) -> None:
        if self.path is not None and time.monotonic() >= self.due:
            self.save()

    def save(self) -> None:
        if self.path is None:
            return
        started = time.monotonic()
        try:
            save_checkpoint(self.path, self.state)
        except OSError as error:  # a full disk must not end the scan: it only loses --resume
            warnings.warn(
                f"scan checkpoint {self.path} not saved ({error.strerror}); "
                "the scan goes on but cannot be resumed",
                RuntimeWarning,
                stacklevel=2,
            )
            self.path = None
            return
        took = time.monotonic() - started
        self.due = time.monotonic() + max(self.every, 10 * took)


def _message(diagnosis: Any) -> str:
    """The exception itself when there is one (``ValueError: corrupt record``), else the title."""
    for line in diagnosis.evidence:
        _, found, raised = line.partition(" raised ")
        if found and ": " in raised:
            return str(raised)
    return str(diagnosis.title)


def _unknown(message: str) -> Any:
    from loaderdoctor.forensics import Diagnosis

    return Diagnosis(
        cause="unknown",
        title=message,
        confidence=0.0,
        worker_id=None,
        pid=None,
        signal=None,
        exit_code=None,
        indices=[],
        evidence=[message],
        fixes=[],
    )


__all__ = ["MAX_ROUNDS", "scan_dataset", "scan_part"]
