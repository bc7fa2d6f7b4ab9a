"""The demo's scenarios, as data, and the run that plants each fault and collects its verdict."""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loaderdoctor.forensics.evidence import Diagnosis

if TYPE_CHECKING:
    from loaderdoctor.demo.dataset import PlantKind

SCHEMA = 1
IMAGES = 48  # = len(dataset.CLASSES) * dataset.IMAGES_PER_CLASS (tested)
BATCH_SIZE = 16
NUM_WORKERS = 2
HANG_TIMEOUT_S = 2.0
# torch's own receive timeout, as a safety net: no scenario may block the demo for ever.
LOADER_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Scenario:
    name: str
    planted: str  # what was planted, for a reader
    plant: PlantKind
    index: int
    expected_cause: str
    # What stock PyTorch says for this failure; {worker_id}, {pid} and {error_type} are filled in.
    stock_message: str
    hang_timeout: float | None = None
    names_file: bool = True  # whether the verdict is expected to name the planted file


# Batches of 16 over 48 samples with 2 workers: worker 0 loads batches 0 and 2 (indices 0-15 and
# 32-47), worker 1 loads batch 1 (16-31). Each fault sits in its worker's first batch, so no
# earlier batch of a dying worker is still in transit and each scenario has one clear failure.
SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        name="corrupt-jpeg",
        planted="a truncated JPEG (the header parses, the pixel data stops half way)",
        plant="truncated-jpeg",
        index=5,
        expected_cause="sample-error",
        stock_message="{error_type}: Caught {error_type} in DataLoader worker process {worker_id}.",
    ),
    Scenario(
        name="native-crash",
        planted="a header that makes the image decoder read address 0 (a real SIGSEGV)",
        plant="native-crash-header",
        index=20,
        expected_cause="native-crash",
        stock_message="RuntimeError: DataLoader worker (pid {pid}) is killed by signal: "
        "Segmentation fault.",
    ),
    Scenario(
        name="ragged-batch",
        planted="one 40×40 image among 32×32 ones, and no resize in the pipeline",
        plant="odd-size",
        index=27,
        expected_cause="collate-error",
        stock_message="RuntimeError: Caught RuntimeError in DataLoader worker process {worker_id}.",
        names_file=False,
    ),
    Scenario(
        name="stalled-read",
        planted=f"a read that never returns, like a dead network mount (hang_timeout={HANG_TIMEOUT_S:g} s)",
        plant="stalled-read",
        index=9,
        expected_cause="worker-hang",
        stock_message="nothing: training waits forever, without an error",
        hang_timeout=HANG_TIMEOUT_S,
    ),
)


@dataclass
class ScenarioResult:
    name: str
    planted: str
    expected_cause: str
    planted_index: int
    planted_file: str
    diagnosis: Diagnosis | None
    seconds: float
    stock_message: str = ""
    error_type: str | None = None  # the type of the exception the loader raised
    error: str | None = None  # what went wrong when no verdict came back
    names_file: bool = True
    dataset_dir: str = ""  # this scenario's dataset (one folder below DemoReport.dataset_dir)
    # With --heal: what healing did, and how much of the epoch still arrived.
    heal_action: str | None = None
    delivered_samples: int | None = None
    quarantine: list[int] | None = None

    @property
    def passed(self) -> bool:
        d = self.diagnosis
        if d is None or d.cause != self.expected_cause or self.planted_index not in d.indices:
            return False
        if self.heal_action is not None:
            # Healing passes when every other sample arrived and the culprit was set aside.
            if self.delivered_samples != IMAGES - 1 or self.planted_index not in (
                self.quarantine or []
            ):
                return False
        return not self.names_file or d.sample_file == self.planted_file

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "planted": self.planted,
            "expected_cause": self.expected_cause,
            "planted_index": self.planted_index,
            "planted_file": self.planted_file,
            "passed": self.passed,
            "seconds": round(self.seconds, 3),
            "stock_message": self.stock_message,
            "error_type": self.error_type,
            "error": self.error,
            "names_file": self.names_file,
            "dataset_dir": self.dataset_dir,
            "diagnosis": self.diagnosis.to_dict() if self.diagnosis else None,
            "heal_action": self.heal_action,
            "delivered_samples": self.delivered_samples,
            "quarantine": self.quarantine,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ScenarioResult:
        diagnosis = data.get("diagnosis")
        return cls(
            name=data["name"],
            planted=data["planted"],
            expected_cause=data["expected_cause"],
            planted_index=data["planted_index"],
            planted_file=data["planted_file"],
            diagnosis=Diagnosis.from_dict(diagnosis) if diagnosis else None,
            seconds=data["seconds"],
            stock_message=data.get("stock_message", ""),
            error_type=data.get("error_type"),
            error=data.get("error"),
            names_file=data.get("names_file", True),
            dataset_dir=data.get("dataset_dir", ""),
            heal_action=data.get("heal_action"),
            delivered_samples=data.get("delivered_samples"),
            quarantine=data.get("quarantine"),
        )


@dataclass
class DemoReport:
    scenarios: list[ScenarioResult]
    seconds: float
    dataset_dir: str = ""  # where the datasets were generated, one folder per scenario
    dataset_kept: bool = False  # left there (``--keep``) rather than removed
    start_method: str = ""
    images: int = 0  # images per scenario's dataset
    batch_size: int = BATCH_SIZE
    num_workers: int = NUM_WORKERS
    heal: bool = False

    @property
    def passed(self) -> bool:
        return bool(self.scenarios) and all(result.passed for result in self.scenarios)

    def to_json(self, indent: int | None = 2) -> str:
        """The report as JSON text; ``to_dict()`` gives the dict."""
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_json(cls, text: str) -> DemoReport:
        """Read back what :meth:`to_json` wrote."""
        return cls.from_dict(json.loads(text))

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "passed": self.passed,
            "seconds": round(self.seconds, 3),
            "dataset_dir": self.dataset_dir,
            "dataset_kept": self.dataset_kept,
            "start_method": self.start_method,
            "images": self.images,
            "batch_size": self.batch_size,
            "num_workers": self.num_workers,
            "heal": self.heal,
            "scenarios": [result.to_dict() for result in self.scenarios],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DemoReport:
        return cls(
            scenarios=[ScenarioResult.from_dict(item) for item in data["scenarios"]],
            seconds=data["seconds"],
            dataset_dir=data.get("dataset_dir", ""),
            dataset_kept=data.get("dataset_kept", False),
            start_method=data.get("start_method", ""),
            images=data.get("images", 0),
            batch_size=data.get("batch_size", BATCH_SIZE),
            num_workers=data.get("num_workers", NUM_WORKERS),
            heal=data.get("heal", False),
        )


def _stock_message(scenario: Scenario, diagnosis: Diagnosis | None, error_type: str | None) -> str:
    worker_id = diagnosis.worker_id if diagnosis and diagnosis.worker_id is not None else "N"
    pid = diagnosis.pid if diagnosis and diagnosis.pid else "N"
    return scenario.stock_message.format(
        worker_id=worker_id, pid=pid, error_type=error_type or "Exception"
    )


def _reap_new_children(before: set[int]) -> None:
    """Kill and join the worker processes a scenario left behind (normally none)."""
    for child in multiprocessing.active_children():
        if child.pid not in before:
            child.kill()
            child.join(timeout=5)


def run_scenario(scenario: Scenario, root: Path, heal: bool = False) -> ScenarioResult:
    """Write the dataset with ``scenario``'s fault planted under ``root``, load it, return the verdict."""
    # torch and Pillow load here, so the scenario table is cheap to import (``--help``).
    from loaderdoctor.demo.dataset import (
        DemoWorkerInit,
        ShapesFolder,
        multiprocessing_temp_dirs,
        remove_worker_temp_dirs,
        write_dataset,
    )
    from loaderdoctor.supervise.loader import DataLoader

    started = time.monotonic()
    planted = write_dataset(root, scenario.plant, scenario.index)
    dataset = ShapesFolder(root)
    temp_list = str(root / "worker-temp-dirs.txt")
    temp_dirs_before = multiprocessing_temp_dirs()
    children_before = {child.pid for child in multiprocessing.active_children() if child.pid}
    loader = DataLoader(
        dataset,
        batch_size=BATCH_SIZE,
        num_workers=NUM_WORKERS,
        worker_init_fn=DemoWorkerInit(str(root / "workers.log"), temp_list),
        timeout=LOADER_TIMEOUT_S,
        hang_timeout=scenario.hang_timeout,
        heal=heal,
    )
    try:
        outcome = _load_one_epoch(loader, heal)
    finally:
        del loader
        _reap_new_children(children_before)
        remove_worker_temp_dirs(temp_list, temp_dirs_before)
    return ScenarioResult(
        name=scenario.name,
        planted=scenario.planted,
        expected_cause=scenario.expected_cause,
        planted_index=scenario.index,
        planted_file=str(planted) if planted else "",
        diagnosis=outcome.diagnosis,
        seconds=time.monotonic() - started,
        stock_message=_stock_message(scenario, outcome.diagnosis, outcome.error_type),
        error_type=outcome.error_type,
        error=outcome.problem,
        names_file=scenario.names_file,
        dataset_dir=str(root),
        heal_action=outcome.heal_action,
        delivered_samples=outcome.delivered,
        quarantine=outcome.quarantine,
    )


@dataclass
class _Outcome:
    """What one epoch of a scenario's loader ended with."""

    diagnosis: Diagnosis | None = None
    error_type: str | None = None
    problem: str | None = None  # why the scenario did not pass, in a line
    heal_action: str | None = None
    delivered: int | None = None
    quarantine: list[int] | None = None


def _load_one_epoch(loader: Any, heal: bool) -> _Outcome:
    outcome = _Outcome()
    try:
        with warnings.catch_warnings():
            # torch's advice for machines with fewer cores than workers is not the demo's point;
            # healing's own warnings are shown in the panel instead.
            warnings.filterwarnings("ignore", message="This DataLoader will create")
            warnings.filterwarnings("ignore", message="loaderdoctor healed")
            for _batch in loader:
                pass
        if not heal:
            outcome.problem = "the loader finished the epoch without an error"
            return outcome
        report = loader.report
        outcome.delivered = report.delivered["samples"]
        outcome.quarantine = list(report.quarantine)
        if report.incidents:
            outcome.diagnosis = report.incidents[0].diagnosis
            outcome.heal_action = report.incidents[0].action
        else:
            outcome.problem = "the loader finished the epoch without an incident"
    except Exception as error:  # a scenario's outcome, whatever it raised
        outcome.error_type = type(error).__name__
        outcome.diagnosis = getattr(error, "diagnosis", None)
        if outcome.diagnosis is None:
            first_line = (str(error).strip().splitlines() or [""])[0]
            outcome.problem = f"{outcome.error_type} without a verdict: {first_line}"
    return outcome


def select_scenarios(names: Sequence[str] | None) -> list[Scenario]:
    if not names:
        return list(SCENARIOS)
    by_name = {scenario.name: scenario for scenario in SCENARIOS}
    unknown = [name for name in names if name not in by_name]
    if unknown:
        known = ", ".join(by_name)
        raise ValueError(f"unknown scenario {', '.join(unknown)} (known: {known})")
    return [by_name[name] for name in names]


def check_keep(base: Path) -> None:
    """``--keep DIR`` must be new or empty: a FileExistsError saying so otherwise."""
    if base.exists() and (not base.is_dir() or any(base.iterdir())):
        raise FileExistsError(f"{base} exists and is not an empty directory")


def run_demo(
    keep: str | os.PathLike[str] | None = None,
    names: Sequence[str] | None = None,
    progress: Callable[[int, int, Scenario], None] | None = None,
    on_result: Callable[[int, int, ScenarioResult], None] | None = None,
    heal: bool = False,
) -> DemoReport:
    """Run every scenario (or those in ``names``) and return their verdicts.

    The datasets are written to a temporary directory that is removed afterwards, or to ``keep``
    (which must not exist or be empty) and left there. ``progress(number, total, scenario)`` is
    called as each scenario starts, ``on_result(number, total, result)`` as it ends.
    """
    scenarios = select_scenarios(names)
    if keep is not None:
        base = Path(keep)
        check_keep(base)
        base.mkdir(parents=True, exist_ok=True)
    else:
        base = Path(tempfile.mkdtemp(prefix="loaderdoctor-demo-"))
    started = time.monotonic()
    results: list[ScenarioResult] = []
    try:
        for number, scenario in enumerate(scenarios, start=1):
            if progress is not None:
                progress(number, len(scenarios), scenario)
            result = run_scenario(scenario, base / scenario.name, heal=heal)
            results.append(result)
            if on_result is not None:
                on_result(number, len(scenarios), result)
    finally:
        if keep is None:
            shutil.rmtree(base, ignore_errors=True)
    return DemoReport(
        scenarios=results,
        seconds=time.monotonic() - started,
        dataset_dir=str(base),
        dataset_kept=keep is not None,
        start_method=multiprocessing.get_start_method(allow_none=False),
        images=IMAGES,
        heal=heal,
    )
