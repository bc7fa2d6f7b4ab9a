"""The env check catalog (data, one row per check) and the ``EnvReport`` that ``env`` returns.

Every check has a stable id: JSON consumers, docs and tests key on it. Add a check by adding a row
here and its measurement in an ``env.checks_*`` module; a test fails if either is missing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, cast

SCHEMA_VERSION = 1

Status = Literal["pass", "warn", "fail", "unknown"]
STATUSES: tuple[Status, ...] = ("pass", "warn", "fail", "unknown")


@dataclass(frozen=True)
class EnvCheckSpec:
    id: str
    title: str
    why: str
    fix: str
    unit: str = "text"  # how renderers show ``value``: "bytes", "count", "text" or "mapping"


CATALOG: tuple[EnvCheckSpec, ...] = (
    EnvCheckSpec(
        "shm-size",
        "Size and free space of /dev/shm",
        "Workers hand every batch to the parent through /dev/shm. Docker and podman give a "
        "container 64 MiB unless told otherwise; a few batches of images fill it and workers die "
        "with 'Bus error' or 'unable to allocate shared memory'.",
        "Give /dev/shm more room: `docker run --shm-size=8g` (podman: the same flag), or in "
        "kubernetes mount an emptyDir with `medium: Memory` at /dev/shm.",
        unit="bytes",
    ),
    EnvCheckSpec(
        "shm-need",
        "Shared memory one epoch needs in flight",
        "Up to num_workers × prefetch_factor collated batches sit in /dev/shm at once; when they "
        "do not fit, a worker dies mid-epoch.",
        "Lower num_workers, prefetch_factor or batch_size, or enlarge /dev/shm (see shm-size).",
        unit="bytes",
    ),
    EnvCheckSpec(
        "memory-limit",
        "Host memory, cgroup limit, usage and swap",
        "The kernel OOM killer enforces the container or cgroup limit, not the host's RAM; a worker "
        "killed this way leaves only 'killed by signal: Killed'.",
        "Raise the container's memory limit (`docker run --memory=...`, kubernetes "
        "`resources.limits.memory`), or use fewer workers.",
        unit="bytes",
    ),
    EnvCheckSpec(
        "worker-memory",
        "Memory each worker grows to, times workers",
        "Each worker is a process: its private memory (copy-on-write pages touched by refcounts, "
        "decoded samples, caches) adds up across workers against the memory limit.",
        "Use fewer workers; keep dataset metadata in numpy arrays rather than Python lists and "
        "dicts (copy-on-write, pytorch/pytorch#13246); open files lazily in each worker.",
        unit="bytes",
    ),
    EnvCheckSpec(
        "open-files",
        "Open-file limit (RLIMIT_NOFILE)",
        "With the default 'file_descriptor' sharing strategy every tensor in flight holds a file "
        "descriptor, and each worker keeps the files its samples open: past the limit workers "
        "fail with 'Too many open files'.",
        "Raise the limit (`ulimit -n 65536`, docker `--ulimit nofile=65536:65536`), or call "
        "`torch.multiprocessing.set_sharing_strategy('file_system')`.",
        unit="count",
    ),
    EnvCheckSpec(
        "cpu",
        "Cores, affinity and cgroup CPU quota",
        "os.cpu_count() reports the host; affinity and the cgroup quota decide how many workers "
        "really run at once. More workers than usable cores only add memory and contention.",
        "Set num_workers to at most the usable cores (leave one for the main process).",
        unit="count",
    ),
    EnvCheckSpec(
        "start-method",
        "Default multiprocessing start method",
        "fork shares the dataset copy-on-write; spawn and forkserver pickle it into each worker and "
        "re-import the main module. Python 3.14 moves Linux from fork to forkserver, so datasets "
        "must be picklable and scripts need `if __name__ == '__main__':`.",
        "Make the dataset picklable (no lambdas, open handles or local classes), guard the script "
        "with `if __name__ == '__main__':`, or pass `multiprocessing_context='fork'` explicitly.",
    ),
    EnvCheckSpec(
        "container",
        "Container runtime",
        "Containers bring their own /dev/shm and memory limits; the fix for each is a runtime flag.",
        "Outside a container nothing to do; inside one, size /dev/shm with the flag shown.",
    ),
    EnvCheckSpec(
        "threads",
        "Thread pools per worker",
        "OpenMP, MKL, OpenBLAS and OpenCV each start one thread per core in every worker unless "
        "told otherwise: workers × cores threads fight over the same cores.",
        "Export OMP_NUM_THREADS=1 (and MKL_NUM_THREADS, OPENBLAS_NUM_THREADS), or call "
        "`cv2.setNumThreads(0)` in worker_init_fn.",
        unit="count",
    ),
    EnvCheckSpec(
        "kernel-log",
        "Kernel log readable for OOM evidence",
        "After a SIGKILL only the kernel log says whether the OOM killer did it and which cgroup "
        "limit was hit; without read access that evidence is lost.",
        "Run as root or with CAP_SYSLOG, or set `sysctl kernel.dmesg_restrict=0`; in docker, the "
        "host's `dmesg` has the evidence.",
    ),
    EnvCheckSpec(
        "versions",
        "Python, torch, numpy and pillow versions",
        "Bug reports and fixes depend on versions; some worker bugs are fixed only in newer torch.",
        "Include these versions in any bug report.",
        unit="mapping",
    ),
)

CATALOG_BY_ID: dict[str, EnvCheckSpec] = {spec.id: spec for spec in CATALOG}

JsonValue = Any  # what json.dumps accepts


@dataclass
class EnvCheck:
    id: str
    status: Status
    value: JsonValue  # the main measurement (bytes, a count, a name) or None
    message: str  # what was measured, in one or two sentences
    fix: str
    title: str = ""
    why: str = ""
    details: dict[str, JsonValue] = field(default_factory=dict)

    def to_json(self) -> dict[str, JsonValue]:
        return {
            "id": self.id,
            "status": self.status,
            "value": self.value,
            "message": self.message,
            "fix": self.fix,
            "title": self.title,
            "why": self.why,
            "details": dict(self.details),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, JsonValue]) -> EnvCheck:
        status = data["status"]
        if status not in STATUSES:
            raise ValueError(f"unknown env check status {status!r}")
        return cls(
            id=str(data["id"]),
            status=cast(Status, status),
            value=data.get("value"),
            message=str(data.get("message", "")),
            fix=str(data.get("fix", "")),
            title=str(data.get("title", "")),
            why=str(data.get("why", "")),
            details=dict(data.get("details") or {}),
        )


@dataclass
class EnvReport:
    checks: list[EnvCheck]
    target: str | None = None
    settings: dict[str, JsonValue] = field(default_factory=dict)
    schema: int = SCHEMA_VERSION

    def counts(self) -> dict[Status, int]:
        counts: dict[Status, int] = dict.fromkeys(STATUSES, 0)
        for check in self.checks:
            counts[check.status] += 1
        return counts

    @property
    def failed(self) -> bool:
        return any(check.status == "fail" for check in self.checks)

    def check(self, check_id: str) -> EnvCheck:
        for check in self.checks:
            if check.id == check_id:
                return check
        raise KeyError(check_id)

    def to_json(self) -> dict[str, JsonValue]:
        return {
            "schema": self.schema,
            "target": self.target,
            "settings": dict(self.settings),
            "summary": self.counts(),
            "checks": [check.to_json() for check in self.checks],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, JsonValue]) -> EnvReport:
        schema = int(data.get("schema", 0))
        if schema != SCHEMA_VERSION:
            raise ValueError(f"env report schema {schema} is not {SCHEMA_VERSION}")
        return cls(
            checks=[EnvCheck.from_json(item) for item in data.get("checks", [])],
            target=data.get("target"),
            settings=dict(data.get("settings") or {}),
            schema=schema,
        )


def make_check(
    check_id: str,
    status: Status,
    value: JsonValue,
    message: str,
    details: Mapping[str, JsonValue] | None = None,
    fix: str | None = None,
) -> EnvCheck:
    """A result for catalog row ``check_id``; ``fix`` overrides the catalog's when more exact."""
    spec = CATALOG_BY_ID[check_id]
    return EnvCheck(
        id=check_id,
        status=status,
        value=value,
        message=message,
        fix=fix if fix is not None else spec.fix,
        title=spec.title,
        why=spec.why,
        details=dict(details or {}),
    )
