"""One ``loaderdoctor scan`` from its options to its files: checks, checkpoints, quarantine.

The command line parses options into a :class:`ScanRequest` and renders what comes back; every
decision is here. :func:`prepare` refuses what would fail later (a bad option, an output that
cannot be written, a checkpoint that would be overwritten or makes no sense) before any sample
is fetched; the :class:`ScanJob` it returns scans, writes the quarantine file and, once every
result is written, removes the checkpoints.
"""

from __future__ import annotations

import glob
import math
import os
import signal
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from loaderdoctor.scan.core import Progress, scan_dataset
from loaderdoctor.scan.findings import quarantine_entries
from loaderdoctor.scan.model import ScanReport
from loaderdoctor.scan.shard import JoinError, Shard, current_shard
from loaderdoctor.scan.state import CheckpointError, ScanState, load_checkpoint
from loaderdoctor.supervise.parent.quarantine import write_quarantine

MIN_MEM_LIMIT = 32 << 20


class ScanUsageError(ValueError):
    """Something the user can fix before scanning (an option, a path, a checkpoint): one line."""


@dataclass
class ScanRequest:
    spec: str
    num_workers: int = 2
    timeout: float = 60.0
    out: str = "quarantine.json"
    mem_limit: int | None = None
    resume: bool = False
    checkpoint: str | None = None  # default: beside ``out``
    checkpoint_every: float = 10.0
    html: str | None = None  # written by the caller (a renderer); proven writable here
    # Scan on a Ray cluster: None scans here; "" joins RAY_ADDRESS's cluster (else starts Ray
    # here), anything else is the head's address.
    ray: str | None = None
    shard_size: int | None = None  # samples per Ray task (None: from the cluster's CPUs)


def prepare(request: ScanRequest) -> ScanJob:
    """A job ready to scan, or :class:`ScanUsageError` before any sample is fetched."""
    _check_options(request)
    shard = current_shard()
    if request.ray is not None:
        _check_ray(shard)
    dataset = load(request.spec)
    length = checked_length(dataset, request.spec)
    checkpoints = Checkpoints(request.checkpoint or default_checkpoint(request.out), shard)
    resume = checkpoints.resume(request.spec, length) if request.resume else None
    if resume is None:
        checkpoints.refuse_to_overwrite()
    # Fail now, not after an hour of scanning, when a result could not be written.
    for path in (request.out, checkpoints.mine, request.html):
        if path is not None:
            ensure_writable(path)
    return ScanJob(request, dataset, shard, checkpoints, resume)


# What one index costs while a scan lists the indices left to fetch (a list slot and an int
# object): a dataset whose __len__ says 2**62 would otherwise take all memory before the first
# sample (3 GiB in 32 s, then the OOM killer).
BYTES_PER_INDEX = 40


def checked_length(dataset: Any, spec: str) -> int:
    """The dataset's length, refused when ``__len__`` raises, lies about its type, says 0, or
    says more samples than this machine can even list."""
    import psutil

    from loaderdoctor.spec import SpecError, dataset_length
    from loaderdoctor.units import format_bytes

    try:
        length = dataset_length(dataset, spec)
    except SpecError as error:
        raise ScanUsageError(str(error)) from None
    if length == 0:
        raise ScanUsageError(f"{spec} has no samples (its len() is 0): nothing to scan")
    need, available = length * BYTES_PER_INDEX, psutil.virtual_memory().available
    if need > available // 2:
        raise ScanUsageError(
            f"{spec}: its __len__ says {length} samples; listing their indices alone would take "
            f"{format_bytes(need)} of the {format_bytes(available)} of memory available: check "
            "__len__, or scan a torch.utils.data.Subset of the dataset"
        )
    return length


def _check_options(request: ScanRequest) -> None:
    if request.num_workers < 1:
        raise ScanUsageError(
            "--num-workers must be at least 1 (each sample needs an isolated worker)"
        )
    if not _positive(request.timeout):
        raise ScanUsageError("--timeout must be a positive number of seconds")
    if not _positive(request.checkpoint_every):
        raise ScanUsageError("--checkpoint-every must be a positive number of seconds")
    if request.mem_limit is not None and request.mem_limit < MIN_MEM_LIMIT:
        raise ScanUsageError("--mem-limit must be at least 32M: a worker needs that to start")
    if request.shard_size is not None:
        if request.ray is None:
            raise ScanUsageError("--shard-size is the samples per Ray task: it needs --ray")
        if request.shard_size < 1:
            raise ScanUsageError("--shard-size must be at least 1 sample")


def _check_ray(shard: Shard) -> None:
    """Ray is there and is the only one spreading the scan (not beside torchrun's ranks)."""
    from loaderdoctor.scan.cluster import RayMissing, import_ray

    if shard.world_size > 1:
        raise ScanUsageError("--ray spreads the scan itself: run it once, not under torchrun")
    try:
        import_ray()
    except RayMissing as error:
        raise ScanUsageError(str(error)) from None


def _positive(seconds: float) -> bool:
    """A positive, finite number (``nan`` compares false to everything and passes ``<= 0``)."""
    return math.isfinite(seconds) and seconds > 0


@dataclass
class ScanJob:
    request: ScanRequest
    dataset: Any
    shard: Shard
    checkpoints: Checkpoints
    resume: ScanState | None

    def scan(self, progress: Progress | None = None) -> ScanReport:
        """Every sample of this rank's shard; rank 0's report covers every rank.

        SIGTERM stops it like Ctrl-C (``KeyboardInterrupt``), with the checkpoint saved.
        """
        try:
            with stop_on_sigterm():
                if self.request.ray is not None:
                    return self._scan_on_ray(progress)
                return scan_dataset(
                    self.dataset,
                    spec=self.request.spec,
                    num_workers=self.request.num_workers,
                    timeout=self.request.timeout,
                    mem_limit=self.request.mem_limit,
                    progress=progress,
                    checkpoint=self.checkpoints.mine,
                    checkpoint_every=self.request.checkpoint_every,
                    resume=self.resume,
                    shard=self.shard,
                )
        except JoinError as error:
            raise ScanUsageError(str(error)) from None

    def _scan_on_ray(self, progress: Progress | None) -> ScanReport:
        """Shards of the index space as Ray tasks; a cluster that cannot be joined is one line
        (:class:`~loaderdoctor.scan.cluster.ClusterLost` mid-scan is the caller's to report)."""
        from loaderdoctor.scan.cluster import (
            ClusterUnreachable,
            RayScan,
            absolute_spec,
            scan_on_ray,
        )

        request = self.request
        options = RayScan(
            address=request.ray or None,
            source=absolute_spec(request.spec),
            load=load,
            folder=os.getcwd(),
            num_workers=request.num_workers,
            timeout=request.timeout,
            mem_limit=request.mem_limit,
            shard_size=request.shard_size,
        )
        try:
            return scan_on_ray(
                self.dataset,
                options,
                spec=request.spec,
                progress=progress,
                checkpoint=self.checkpoints.mine,
                resume=self.resume,
            )
        except ClusterUnreachable as error:
            raise ScanUsageError(str(error)) from None

    def write_quarantine(self, report: ScanReport) -> str | None:
        """The quarantine file's path if written: when bad samples were found, or to replace a
        stale file of an earlier scan (a clean scan leaves no file behind)."""
        out = self.request.out
        if report.shared_failure is not None:  # the samples are not to blame: no file of them
            return None
        if not report.bad and not os.path.exists(out):
            return None
        try:
            write_quarantine(out, quarantine_entries(report))
        except OSError as error:
            raise ScanUsageError(f"cannot write quarantine file {out}: {error}") from None
        return out

    def finish(self) -> None:
        """Every result is written: nothing left to resume (rank 0 removes every rank's)."""
        self.checkpoints.remove(every_rank=self.shard.is_leader)


def load(spec: str) -> Any:
    """The dataset behind SPEC: an image folder, or a spec that ``spec.load_dataset`` resolves."""
    if os.path.isdir(spec):
        from loaderdoctor.scan.images import ImageFolderScan

        images = ImageFolderScan(spec)
        if not len(images):
            raise ScanUsageError(f"no image files under {spec}")
        return images
    if ":" not in spec:
        raise ScanUsageError(
            f"no such folder: {spec} (or give a dataset spec, path/to/file.py:NAME)"
        )
    from loaderdoctor.spec import SpecError, load_dataset

    try:
        dataset = load_dataset(spec)
    except SpecError as error:
        raise ScanUsageError(str(error)) from None
    dataset = getattr(dataset, "dataset", dataset) if hasattr(dataset, "batch_sampler") else dataset
    if not (hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__")):
        raise ScanUsageError(
            f"{spec} is an iterable-style dataset; scan needs __getitem__ and __len__"
        )
    return dataset


def ensure_writable(path: str) -> None:
    """A file can be created beside ``path`` (its folder is made if missing), or one clear error.

    Results are written whole (a temporary file renamed over the file ``path`` names): it
    must be a regular file, or ``--out /dev/null`` run as root would replace the device.
    """
    target = os.path.realpath(path)
    if os.path.exists(target) and not os.path.isfile(target):
        raise ScanUsageError(f"cannot write {path}: not a regular file")
    folder = os.path.dirname(target)
    try:
        os.makedirs(folder, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        raise ScanUsageError(f"cannot write {path}: {error.strerror or error}") from None


def default_checkpoint(out: str) -> str:
    """``quarantine.json`` -> ``quarantine.checkpoint.json``, beside it."""
    root, _ = os.path.splitext(out)
    return f"{root}.checkpoint.json"


class Checkpoints:
    """The checkpoint files of a scan: one, or one per torchrun rank (``PATH.rank<N>``)."""

    def __init__(self, path: str, shard: Shard) -> None:
        self.path = path
        self.mine = path if shard.world_size == 1 else f"{path}.rank{shard.rank}"

    def existing(self) -> list[str]:
        ranks = sorted(glob.glob(glob.escape(self.path) + ".rank*"))
        return [p for p in [self.path, *ranks] if os.path.isfile(p)]

    def resume(self, spec: str, total: int) -> ScanState:
        """Every checkpoint's samples merged (ranks' files included), or a one-line error."""
        found = self.existing()
        if not found:
            raise ScanUsageError(f"--resume: no checkpoint at {self.path}; nothing to resume")
        state = ScanState(spec, total)
        for path in found:
            try:
                state.merge(load_checkpoint(path, spec, total))
            except CheckpointError as error:
                raise ScanUsageError(str(error)) from None
        return state

    def refuse_to_overwrite(self) -> None:
        """An interrupted scan's progress is never thrown away without being asked to."""
        found = self.existing()
        if found:
            raise ScanUsageError(
                f"an interrupted scan left {found[0]}: pass --resume to continue it, "
                "or delete it to start over"
            )

    def remove(self, every_rank: bool) -> None:
        """A completed scan needs no checkpoint: remove this rank's (rank 0: everyone's)."""
        for path in self.existing() if every_rank else [self.mine]:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass


@contextmanager
def stop_on_sigterm() -> Iterator[None]:
    """SIGTERM (a scheduler, ``kill``) stops the scan like Ctrl-C: the checkpoint is saved."""

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, interrupt)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
