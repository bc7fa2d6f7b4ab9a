"""Scale a scan out on a Ray cluster: shards of the index space as Ray tasks, one report.

This process (Ray's driver) splits the indices not scanned yet into shards and sends each to a
Ray task. The task loads the dataset from its spec on its node and scans its shard with the
isolation of a local scan (:func:`~loaderdoctor.scan.core.scan_part`: its own supervised workers,
so a crash, an OOM kill or a hang still names its sample, on that node). Each finished shard's
results come back into the one state, which is checkpointed as shards finish: a node or a whole
cluster lost mid-scan loses no finished shard, and ``--resume`` scans only what is left.

Ray re-runs the tasks of a lost node on the nodes left (its own retries): a scan outlives a node.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from loaderdoctor.scan.core import Progress, _Saver, scan_part
from loaderdoctor.scan.findings import build_report
from loaderdoctor.scan.model import ScanReport, ShardRun
from loaderdoctor.scan.state import ScanState

RAY_EXTRA = "pip install 'loaderdoctor[ray]'"
# Shards per task slot of the cluster: the last shards end close together, and a lost node
# loses little work; between a floor that keeps a shard's worker start-up small beside its
# samples and a ceiling that keeps the time between checkpoints short.
SHARDS_PER_SLOT = 4
MIN_SHARD = 32
MAX_SHARD = 4096
WAIT_S = 1.0  # the driver wakes at least this often: Ctrl-C and SIGTERM act within it
CONNECT_TIMEOUT_S = 10.0  # a head that does not answer a TCP connection in this time is wrong
TASK_RETRIES = 3  # Ray's own re-runs of a task whose node or worker process died


# A Ray started for this scan: no dashboard, and workers at the scan's own priority. Ray runs its
# workers at nice 15 (RAY_worker_niceness), below everything else on the machine: beside other
# work that halved the scan's rate on a shared 2-core machine.
LOCAL_RAY: dict[str, Any] = {"include_dashboard": False, "_system_config": {"worker_niceness": 0}}


class RayMissing(Exception):
    """Ray is not installed: one line naming the extra."""


class ClusterUnreachable(Exception):
    """The address names no Ray cluster that answers: one line."""


class ClusterLost(Exception):
    """The cluster failed mid-scan (a shard lost past Ray's retries): one line; the checkpoint
    holds every finished shard."""


@dataclass(frozen=True)
class RayScan:
    """Where and how: ``address`` None joins ``RAY_ADDRESS``'s cluster, else starts Ray here."""

    address: str | None
    source: str  # the spec each task loads: paths made absolute, so that any folder will do
    load: Callable[[str], Any]  # spec -> dataset (sent to the tasks by reference)
    folder: str  # the driver's folder: where ``package.module:NAME`` is found, as here
    num_workers: int = 2
    timeout: float = 60.0
    mem_limit: int | None = None
    shard_size: int | None = None  # None: from the cluster's CPUs


def import_ray() -> ModuleType:
    try:
        import ray
    except ImportError:
        raise RayMissing(f"--ray needs Ray, which is not installed: {RAY_EXTRA}") from None
    return ray


def scan_on_ray(
    dataset: Any,
    options: RayScan,
    *,
    spec: str,
    progress: Progress | None = None,
    checkpoint: str | os.PathLike[str] | None = None,
    resume: ScanState | None = None,
) -> ScanReport:
    """Every index of ``dataset`` scanned by Ray tasks; ``dataset`` here only names files."""
    from loaderdoctor.supervise.samples import sample_file

    ray = import_ray()
    total = len(dataset)
    state = resume if resume is not None else ScanState(spec, total)
    resumed = len(state)
    saver = _Saver(checkpoint, 0.0, state)  # after each shard, unless saving costs more
    start = time.perf_counter()
    caps: set[str] = set()
    # Ray's driver prints the cluster's events (a node that died) on stdout, where the report
    # goes (--json): they go to stderr, beside the progress.
    with contextlib.redirect_stdout(sys.stderr):
        joined = not ray.is_initialized()  # a program already connected keeps its connection
        if joined:
            connect(ray, options.address)
        try:
            caps = _run_shards(ray, options, state, progress, saver)
        finally:
            saver.save()  # also when interrupted or lost: every finished shard is kept
            if joined:
                ray.shutdown()
    return build_report(
        state,
        functools.partial(sample_file, dataset),
        seconds=round(time.perf_counter() - start, 3),
        num_workers=options.num_workers,
        timeout=options.timeout,
        mem_limit_bytes=options.mem_limit,
        mem_cap=", ".join(sorted(caps)) or None,
        ranks=1,
        resumed=resumed,
    )


def connect(ray: ModuleType, address: str | None) -> None:
    """Join the cluster at ``address`` (None: ``RAY_ADDRESS``'s, else a Ray started here)."""
    import logging

    if address not in (None, "auto", "local"):
        _check_reachable(address)
    # Ray's driver installs a handler of its own that aborts on SIGTERM: the scan's (save the
    # checkpoint, say how to resume) is put back once it is connected.
    on_sigterm = signal.getsignal(signal.SIGTERM)
    starts_ray = address is None and not os.environ.get("RAY_ADDRESS")
    with _stderr_kept() as said:
        try:
            ray.init(
                address=address,
                logging_level=logging.ERROR,
                log_to_driver=False,  # the workers' own output is the report's evidence, not ours
                **(LOCAL_RAY if starts_ray else {}),
            )
        except (ConnectionError, RuntimeError, ValueError, ray.exceptions.RayError) as error:
            # Ray's twenty retry lines are replaced by the one line that says what they meant
            said.replaced = refused_authentication(error, said.text())
            raise ClusterUnreachable(join_error(error, address, said.text(), os.environ)) from None
    if on_sigterm is not None and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, on_sigterm)


# What Ray's client says, on stderr, for each of its tries (about 20 s of them) when the cluster
# has token authentication on (Ray 2.60's ``ray start`` turns it on where a token exists) and the
# token is missing or wrong; its ConnectionError then says only "Failed to connect".
AUTH_REFUSED = ("Unauthenticated", "InvalidAuthToken")


def join_error(
    error: BaseException, address: str | None, ray_said: str, environ: Mapping[str, str]
) -> str:
    """The one line for a failed ``ray.init``: an authentication failure says so, and how to
    give the token (Ray's own variables: the client needs both the mode and the token)."""
    where = f"at {address}" if address else "(RAY_ADDRESS, or a local Ray)"
    if not refused_authentication(error, ray_said):
        return f"cannot join the Ray cluster {where}: {_first_line(error)}"
    given = [name for name in ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH") if environ.get(name)]
    if given and environ.get("RAY_AUTH_MODE", "").lower() == "token":
        cause = f"the token given ({' and '.join(given)}) is not the cluster's"
    elif given:
        cause = f"{' and '.join(given)} is set, but RAY_AUTH_MODE is not 'token'"
    else:
        cause = "no token was given"
    return (
        f"cannot join the Ray cluster {where}: authentication failed ({cause}): the cluster has "
        "token authentication on; pass its token with RAY_AUTH_MODE=token and "
        "RAY_AUTH_TOKEN=TOKEN (or RAY_AUTH_TOKEN_PATH=FILE) in the environment "
        "(`ray get-auth-token` on the head prints it)"
    )


def refused_authentication(error: BaseException, ray_said: str) -> bool:
    told = f"{ray_said}\n{error}\n{error.__cause__ or ''}"
    return type(error).__name__ == "AuthenticationError" or any(cue in told for cue in AUTH_REFUSED)


class _RaySaid:
    """What Ray wrote on stderr while joining, kept in a file."""

    def __init__(self, file: Any) -> None:
        self.file = file
        self.replaced = False  # by our one line

    def text(self) -> str:
        self.file.seek(0)
        return str(self.file.read().decode("utf-8", "replace"))


@contextlib.contextmanager
def _stderr_kept() -> Iterator[_RaySaid]:
    """Ray's client writes its retries on file descriptor 2 from C++: held while joining, and
    written out after, unless the one line that says why joining failed replaces them."""
    import tempfile

    sys.stderr.flush()
    with tempfile.TemporaryFile() as file:
        said = _RaySaid(file)
        try:
            saved = os.dup(2)
        except OSError:  # no stderr to hold
            yield said
            return
        os.dup2(file.fileno(), 2)
        try:
            yield said
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            if not said.replaced:
                sys.stderr.write(said.text())


def _check_reachable(address: str) -> None:
    """A head that nothing answers at is one line now, not Ray's minute of retries."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise ClusterUnreachable(f"--ray {address}: expected HOST:PORT of the cluster's head")
    try:
        socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise ClusterUnreachable(f"no Ray cluster answers at {address} ({reason})") from None


def absolute_spec(spec: str) -> str:
    """``spec`` with its file or folder made absolute: a Ray worker's folder is not ours."""
    if os.path.isdir(spec):
        return os.path.abspath(spec)
    location, separator, name = spec.rpartition(":")
    if separator and (location.endswith(".py") or "/" in location or os.sep in location):
        return f"{os.path.abspath(location)}:{name}"
    return spec


def shards_of(remaining: list[int], size: int) -> list[list[int]]:
    return [remaining[i : i + size] for i in range(0, len(remaining), size)]


def shard_size(remaining: int, slots: int) -> int:
    """Samples per shard: ``SHARDS_PER_SLOT`` shards per slot, within the floor and ceiling."""
    wanted = -(-remaining // max(1, slots * SHARDS_PER_SLOT))
    return max(1, min(MAX_SHARD, max(MIN_SHARD, wanted)))


def _run_shards(
    ray: ModuleType,
    options: RayScan,
    state: ScanState,
    progress: Progress | None,
    saver: _Saver,
) -> set[str]:
    """Keep every slot of the cluster busy with a shard; merge each one as it finishes."""
    remaining = [i for i in range(state.total) if not state.done(i)]
    cpus, largest = _cluster_cpus(ray)
    per_task = max(1, min(options.num_workers, largest))  # a task no node can hold never runs
    slots = max(1, cpus // per_task)
    size = options.shard_size or shard_size(len(remaining), slots)
    queue = deque(shards_of(remaining, size))
    task = ray.remote(_scan_shard).options(
        num_cpus=per_task, scheduling_strategy="SPREAD", max_retries=TASK_RETRIES
    )
    pending: dict[Any, list[int]] = {}
    caps: set[str] = set()
    if progress is not None:
        progress(len(state), state.total)
    while queue or pending:
        while queue and len(pending) < 2 * slots:  # one waiting per slot: no slot idles
            shard = queue.popleft()
            pending[task.remote(options, state.spec, state.total, shard)] = shard
        ready, _ = ray.wait(list(pending), num_returns=1, timeout=WAIT_S)
        for ref in ready:
            shard = pending.pop(ref)
            part, cap = _result(ray, ref, shard)
            state.merge(part)
            if cap is not None:
                caps.add(cap)
            if progress is not None:
                progress(len(state), state.total)
            saver.maybe_save()
    return caps


def _cluster_cpus(ray: ModuleType) -> tuple[int, int]:
    """The cluster's CPUs and the most that one node has (both at least 1)."""
    nodes = [node for node in ray.nodes() if node.get("Alive")]
    per_node = [int(node.get("Resources", {}).get("CPU", 0)) for node in nodes]
    return max(1, sum(per_node)), max([1, *per_node])


def _result(ray: ModuleType, ref: Any, shard: list[int]) -> tuple[ScanState, str | None]:
    """A finished shard's state, with its node; :class:`ClusterLost` if it is lost."""
    try:
        data = ray.get(ref)
    except ray.exceptions.RayError as error:
        samples = f"samples {shard[0]}-{shard[-1]}"
        if isinstance(error, ray.exceptions.RayTaskError):  # it raised (the spec on a node)
            cause = error.cause if isinstance(error.cause, BaseException) else error
            what = f"a Ray task could not scan {samples}"
        else:  # its node or worker process died past Ray's retries, or its result is gone
            cause, what = error, f"the Ray cluster lost the shard of {samples}"
        raise ClusterLost(f"{what}: {type(cause).__name__}: {_first_line(cause)}") from None
    part = ScanState.from_dict(data["state"])
    part.shards.append(
        ShardRun(
            first=shard[0],
            last=shard[-1],
            samples=len(shard),
            node=data["node"],
            node_id=data["node_id"],
            seconds=data["seconds"],
        )
    )
    return part, data["cap"]


_datasets: dict[str, Any] = {}  # spec -> dataset, per Ray worker process: loaded once


def _scan_shard(options: RayScan, spec: str, total: int, shard: list[int]) -> dict[str, Any]:
    """A Ray task: scan one shard on this node; the results as plain data."""
    import ray

    start = time.perf_counter()
    dataset = _datasets.get(options.source)
    if dataset is None:
        if os.path.isdir(options.folder) and options.folder not in sys.path:
            sys.path.append(options.folder)
        dataset = _datasets[options.source] = options.load(options.source)
    state = ScanState(spec, total)
    cap = scan_part(
        dataset,
        shard,
        state,
        num_workers=options.num_workers,
        timeout=options.timeout,
        mem_limit=options.mem_limit,
    )
    context = ray.get_runtime_context()
    return {
        "state": state.to_dict(),
        "node": ray.util.get_node_ip_address(),
        "node_id": context.get_node_id(),
        "seconds": round(time.perf_counter() - start, 3),
        "cap": cap,
    }


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__
