"""The data of a ``loaderdoctor run``: ``RunReport`` and its parts, serializable both ways.

``RunReport.to_dict()`` is ``report.json``; its first keys are the DESIGN.md contract (``schema``,
``status``, ``incidents``, ``quarantine``, ``delivered``), the rest are additions.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, Literal

from loaderdoctor.forensics.incident import HEALING_ACTIONS, Incident
from loaderdoctor.jsonshape import ShapeError, check_shape, json_kind

SCHEMA = 1
RunStatus = Literal["ok", "crashed", "healed", "healed-with-loss"]
# "running": a live run's report so far (``loaderdoctor report DIR`` shows it, never writes it)
SupervisorFate = Literal["finished", "died", "running"]


def _known(cls: type, data: dict[str, Any]) -> dict[str, Any]:
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in data.items() if k in names}


@dataclass
class Delivered:
    batches: int = 0
    samples: int = 0


@dataclass
class UnsupervisedLoader:
    """A DataLoader subclass whose ``__init__`` never reached torch's (torchdata's
    ``StatefulDataLoader``): it ran as its own code, unwatched. ``count``: loaders built there."""

    loader: str  # the class name
    site: str  # "file:line" where it was built (and the user's line, where that differs)
    reason: str
    count: int = 1


@dataclass
class ProcessDeath:
    """A process of the command that died, by a signal or with a failing exit code, and that the
    process which started it left uncollected (a zombie), seen by ``run`` from outside: not a
    DataLoader worker (their deaths are incidents, or torch's own error), but a process of a
    pool we do not supervise (torchdata.nodes' process workers, a ``multiprocessing`` pool, a
    tool's helper). ``uncollected_s``: how long ``run`` saw it uncollected; its parent still
    waiting for it then may wait for ever."""

    pid: int
    parent_pid: int
    name: str  # the kernel's name of the process (comm)
    command: str  # its command line, read while it lived ("" where it never was)
    parent_command: str
    signal: str | None  # "SIGSEGV", where a signal ended it
    exit_code: int | None  # where it exited by itself
    seen_s: float  # when ``run`` first saw it dead, in seconds since the command started
    uncollected_s: float
    kernel_log: list[str] = field(default_factory=list)  # the kernel's lines that name it
    node: str | None = None  # in a job report: the node it died on (pids are per node)

    @property
    def ended(self) -> str:
        """``killed by SIGSEGV`` or ``exited with code 3``."""
        if self.signal is not None:
            return f"killed by {self.signal}"
        return f"exited with code {self.exit_code}"


@dataclass
class ProcessSummary:
    """One process of the command that created supervised DataLoaders (a script, a rank)."""

    pid: int
    rank: int | None
    loaders: int  # supervised DataLoaders iterated (built and never used: not counted)
    delivered: Delivered
    incidents: int
    workers: int = 0  # DataLoader worker processes it ran, respawns included
    # Whether its workers go before it when memory runs out (the loader report's line)
    oom_protection: str | None = None
    node: str | None = None  # in a job report: the node folder whose run saw it
    # How run reached its DataLoaders: "run" (the environment run gave the command, inherited)
    # or "ray-hook" (a Ray worker of a cluster started before run: Ray's worker setup hook)
    reached: str = "run"


@dataclass
class ProcessMemory:
    """The memory of one process over the run; ``series`` rows are (t_s, rss, uss, pss)."""

    pid: int
    role: Literal["main", "worker"]
    rank: int | None = None
    parent_pid: int | None = None
    start_method: str | None = None
    first_seen_s: float = 0.0
    last_seen_s: float = 0.0
    peak_rss_bytes: int = 0
    peak_uss_bytes: int | None = None
    peak_pss_bytes: int | None = None
    series: list[tuple[float, int, int | None, int | None]] = field(default_factory=list)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ProcessMemory:
        values = _known(cls, data)
        values["series"] = [tuple(row) for row in values.get("series", [])]
        return cls(**values)


@dataclass
class MemoryFinding:
    """A pattern in the memory timeline (copy-on-read growth, ...) with its explanation and fixes."""

    id: str
    title: str
    explanation: str
    fixes: list[str]
    pids: list[int]
    evidence: list[str]
    docs: str = ""


@dataclass
class MemoryReport:
    interval_s: float
    samples: int = 0
    shm_total_bytes: int | None = None
    shm_peak_used_bytes: int | None = None
    shm_series: list[tuple[float, int]] = field(default_factory=list)  # (t_s, used bytes)
    processes: list[ProcessMemory] = field(default_factory=list)
    findings: list[MemoryFinding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MemoryReport:
        values = _known(cls, data)
        values["shm_series"] = [tuple(row) for row in values.get("shm_series", [])]
        values["processes"] = [ProcessMemory.from_dict(p) for p in values.get("processes", [])]
        values["findings"] = [MemoryFinding(**f) for f in values.get("findings", [])]
        return cls(**values)


@dataclass
class NodeInfo:
    """Which node of a multi-node job one ``loaderdoctor run`` supervised, as its command line
    (torchrun's ``--node-rank``, ``--nnodes``, ``--rdzv-id``) or environment (``NODE_RANK``,
    ``SLURM_NODEID``, ``GROUP_RANK``, ``SLURM_JOB_ID``) said it when the run started."""

    name: str  # its folder under the job's report dir, unique on a shared file system
    host: str
    rank: int | None = None  # the node rank; None when the rendezvous assigns it later
    nnodes: str | None = None  # as given: "2", or a range "1:4"
    job_id: str | None = None  # the same on every node of one job; None when nothing says it
    started_wall: float = 0.0  # seconds since the epoch, to order the nodes' incidents


@dataclass
class EndedBy:
    """The node (and rank, where one is known) whose failure ended a job."""

    node: str
    node_rank: int | None
    rank: int | None
    cause: str | None  # the incident's cause; None when the command failed on its own
    exit_code: int


@dataclass
class NodeSummary:
    """One node's run in a job report; its own report stays in ``report``."""

    name: str
    host: str
    rank: int | None
    status: RunStatus
    exit_code: int
    signal: str | None
    duration_s: float
    ranks: list[int | None]  # the global ranks of its processes with supervised DataLoaders
    incidents: int
    delivered: Delivered
    report: str  # its report.json, relative to the job's folder
    supervisor: SupervisorFate = "finished"


@dataclass
class JobSummary:
    """What a job report adds: the job's id, its node count and what ended it."""

    id: str | None
    nodes: int
    ended_by: EndedBy | None = None


@dataclass
class RunReport:
    """Everything ``loaderdoctor run`` learned about one command."""

    status: RunStatus
    command: list[str]
    exit_code: int
    duration_s: float
    incidents: list[Incident] = field(default_factory=list)
    quarantine: list[Any] = field(default_factory=list)
    delivered: Delivered = field(default_factory=Delivered)
    ranks: list[ProcessSummary] = field(default_factory=list)
    memory: MemoryReport | None = None
    signal: str | None = None  # the signal that ended the command, if one did
    interrupted: bool = False  # loaderdoctor run itself was sent SIGINT/SIGTERM and forwarded it
    started_at: str = ""  # ISO 8601, local time
    report_dir: str = ""
    notes: list[str] = field(default_factory=list)
    # "finished": run saw its command end; "died": run ended first (killed), and the command
    # (or, failing that, run's own report written at the start) says what was known then.
    supervisor: SupervisorFate = "finished"
    # False when no process saw the command end (run was killed first, and the command's own
    # processes wrote nothing after): ``exit_code`` is then -1, never a guessed status.
    exit_known: bool = True
    # The files of the report folder that could not be written (full, read-only): the summary
    # printed and the HTML page say so where report.json itself could not
    unwritten: list[str] = field(default_factory=list)
    unsupervised_loaders: list[UnsupervisedLoader] = field(default_factory=list)
    # Processes of the command that died outside any supervised DataLoader and were left
    # uncollected by their parent (a pool that waits for them waits for ever)
    process_deaths: list[ProcessDeath] = field(default_factory=list)
    # Processes whose DataLoaders run may not have reached, each with the reason (a Ray cluster
    # joined whose workers wrote nothing): a worker death there is torch's own error, unseen
    unreached: list[str] = field(default_factory=list)
    # Wrong data delivered without an error (a duplicated stream, a frozen shuffle, stale
    # persistent workers, cloned random generators): kind, title, epoch, evidence, fix
    data_findings: list[dict[str, Any]] = field(default_factory=list)
    # Whether the workers and the samples re-tried alone go before the training process(es) when
    # memory runs out, as the loader report says it; None when no worker ran.
    oom_protection: str | None = None
    # A node's report: which node of a multi-node job it is; None for a single-machine run
    node: NodeInfo | None = None
    # A job report (``loaderdoctor report DIR`` over node folders): its nodes, in node order
    job: JobSummary | None = None
    nodes: list[NodeSummary] = field(default_factory=list)
    schema: int = SCHEMA

    def to_json(self, indent: int | None = 2) -> str:
        """The report as JSON text; ``to_dict()`` gives the dict."""
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_json(cls, text: str) -> RunReport:
        """Read back what :meth:`to_json` wrote."""
        return cls.from_dict(json.loads(text))

    def to_dict(self) -> dict[str, Any]:
        # The incidents in their own JSON form, not asdict's (which would copy each one first)
        data = dataclasses.asdict(dataclasses.replace(self, incidents=[]))
        data["incidents"] = [incident.to_dict() for incident in self.incidents]
        head = {key: data.pop(key) for key in ("schema", "status", "incidents", "quarantine")}
        head["delivered"] = data.pop("delivered")
        return {**head, **data}

    @classmethod
    def from_dict(cls, data: object) -> RunReport:
        """The report in ``data``; ``ValueError`` naming the first field that makes no sense."""
        if not isinstance(data, dict):
            raise ShapeError(f"expected a JSON object, got {json_kind(data)}")
        if data.get("schema") != SCHEMA:
            raise ValueError(
                f"report schema {data.get('schema')!r}; this loaderdoctor reads {SCHEMA}"
            )
        check_shape(data, cls, "report")
        values = _known(cls, data)
        values["incidents"] = [Incident.from_dict(i) for i in values.get("incidents", [])]
        values["delivered"] = Delivered(**values.get("delivered", {}))
        values["ranks"] = [
            ProcessSummary(
                **{**_known(ProcessSummary, r), "delivered": Delivered(**r.get("delivered", {}))}
            )
            for r in values.get("ranks", [])
        ]
        values["unsupervised_loaders"] = [
            UnsupervisedLoader(**_known(UnsupervisedLoader, u))
            for u in values.get("unsupervised_loaders", [])
        ]
        values["process_deaths"] = [
            ProcessDeath(**_known(ProcessDeath, d)) for d in values.get("process_deaths", [])
        ]
        if values.get("memory") is not None:
            values["memory"] = MemoryReport.from_dict(values["memory"])
        if values.get("node") is not None:
            values["node"] = NodeInfo(**_known(NodeInfo, values["node"]))
        if values.get("job") is not None:
            job = _known(JobSummary, values["job"])
            if job.get("ended_by") is not None:
                job["ended_by"] = EndedBy(**_known(EndedBy, job["ended_by"]))
            values["job"] = JobSummary(**job)
        values["nodes"] = [
            NodeSummary(**{**_known(NodeSummary, n), "delivered": Delivered(**n["delivered"])})
            for n in values.get("nodes", [])
        ]
        return cls(**values)


UNKNOWN_EXIT_CODE = -1  # ``exit_code`` of a report whose command's end nobody saw


def run_status(
    exit_code: int, incidents: list[Incident], delivered_samples: int | None = None
) -> RunStatus:
    """crashed: the command failed or a loader raised, or healing delivered no sample at all
    (skipping every sample heals nothing), or nobody saw the command end (``UNKNOWN_EXIT_CODE``:
    a success is never claimed without its exit status); healed: every incident was healed;
    healed-with-loss: healed, but healthy samples were lost (an incident's action "lost")."""
    if exit_code != 0 or any(i.action not in HEALING_ACTIONS for i in incidents):
        return "crashed"
    if incidents and delivered_samples == 0:
        return "crashed"
    if any(i.action == "lost" for i in incidents):
        return "healed-with-loss"
    return "healed" if incidents else "ok"
