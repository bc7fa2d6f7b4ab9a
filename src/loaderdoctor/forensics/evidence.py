"""What the supervisor saw at a failure (``Evidence``) and what forensics concluded (``Diagnosis``)."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, Literal

FailureKind = Literal["death", "exception", "hang", "start"]


@dataclass
class Evidence:
    """Everything collected about one failure. Sources that could not be read say why in ``notes``."""

    kind: FailureKind
    worker_id: int | None = None
    pid: int | None = None
    exit_code: int | None = None  # a positive exit status (the worker called exit)
    signal: str | None = None  # "SIGKILL", ... (the worker was killed by a signal)
    start_method: str | None = None
    stage: str | None = None  # "init", "fetch", "collate", "idle", "not-started"
    in_flight_index: Any = None  # the sample being fetched (an int for map-style datasets)
    batch_indices: list[Any] | None = None  # every index of the batch in flight
    batch: int | None = None  # the loader's batch number (task index) in flight
    odd_indices: list[Any] | None = None  # collate: samples whose structure differs from the rest
    epoch: int | None = None
    iterable_position: int | None = None  # IterableDataset: items this worker had fetched
    stream_key: Any = None  # IterableDataset: the key of the item in flight, where known
    sample_file: str | None = None
    # The shard file holding the sample, where it is not the sample's own (a Hugging Face Arrow file)
    sample_shard: str | None = None
    # A Python exception (kind == "exception" or "start")
    exception_type: str | None = None
    exception_message: str | None = None
    traceback: str | None = None
    errno: int | None = None
    root_exception: str | None = None  # "OSError: ..." at the root of a chained exception
    # Kernel and machine
    kernel_log: list[str] = field(default_factory=list)
    kernel_log_readable: bool | None = None
    oom_kill_for_pid: bool = False
    cgroup_oom_kills_before: int | None = None
    cgroup_oom_kills_after: int | None = None
    cgroup_limit_bytes: int | None = None
    shm_total_bytes: int | None = None
    shm_free_bytes: int | None = None
    worker_rss_bytes: int | None = None
    open_files_limit: int | None = None  # RLIMIT_NOFILE of the process that ran out
    sharing_strategy: str | None = None  # torch.multiprocessing's: "file_descriptor", ...
    dataset_length: int | None = None  # len(dataset) of a map-style Dataset
    last_loaded_index: Any = None  # the last index the worker loaded before the failing one
    # Native crash / hang
    python_stack: str | None = None  # faulthandler's dump of the worker's threads
    exit_frame: str | None = None  # "file:line in function": where a worker called sys.exit()
    seconds_without_progress: float | None = None
    # Spawn start-up
    reached_worker_init: bool | None = None
    main_script: str | None = None
    main_guard_missing: bool | None = None
    bootstrap_marker: str | None = None  # written by a worker that re-ran an unguarded script
    unpicklable_parts: list[str] = field(default_factory=list)
    # The innermost object pickle refused: "dataset.transform.transforms[0]", "batch[1]"
    unpicklable_path: str | None = None
    unpicklable_type: str | None = None  # "lambda", "generator", "function 'f.<locals>.g'"
    # parts that reference a class or function of a __main__ without a file (a notebook)
    fileless_main_parts: list[str] = field(default_factory=list)
    # The innermost frame of the exception lies in loaderdoctor's own code (a bug of ours)
    internal_origin: str | None = None  # "file:line in function" of that frame
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Evidence:
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass
class Diagnosis:
    """The verdict on one failure: the cause, the sample, the evidence lines and the fixes."""

    cause: str
    title: str
    confidence: float  # 0..1
    worker_id: int | None
    pid: int | None
    signal: str | None
    exit_code: int | None
    indices: list[Any]
    evidence: list[str]
    fixes: list[str]
    explanation: str = ""
    sample_file: str | None = None
    batch: int | None = None
    epoch: int | None = None
    python_stack: str | None = None
    alternatives: list[tuple[str, float]] = field(default_factory=list)
    docs: str = ""
    # IterableDataset: the culprit's position in its worker's stream, and its key where known
    position: int | None = None
    key: Any = None
    shard: str | None = None  # the shard file that holds the sample (a Hugging Face Arrow file)

    def to_json(self, indent: int | None = 2) -> str:
        """The report as JSON text; ``to_dict()`` gives the dict."""
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_json(cls, text: str) -> Diagnosis:
        """Read back what :meth:`to_json` wrote."""
        return cls.from_dict(json.loads(text))

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["alternatives"] = [list(pair) for pair in self.alternatives]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Diagnosis:
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["alternatives"] = [tuple(pair) for pair in values.get("alternatives", [])]
        return cls(**values)
