"""``env``'s core: measure the machine (and, with a target, the dataset) against the check catalog.

``CHECKS`` is the registry: one measuring function per catalog row, each ``check(inputs)``; a test
holds it equal to the catalog. No torch import unless a target is given, so ``loaderdoctor env``
answers in well under a second.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from loaderdoctor.env import (
    checks_imports,
    checks_limits,
    checks_memory,
    checks_runtime,
    checks_shm,
)
from loaderdoctor.env.catalog import CATALOG
from loaderdoctor.env.facts import Inputs, Machine, Settings, TargetImports, probe_machine
from loaderdoctor.env.findings import EnvCheck, EnvReport, make_check
from loaderdoctor.env.probe import LoaderParts, loader_parts, run_load_probe

logger = logging.getLogger(__name__)

Check = Callable[[Inputs], EnvCheck]

CHECKS: dict[str, Check] = {
    "shm-size": checks_shm.check_shm_size,
    "shm-need": checks_shm.check_shm_need,
    "memory-limit": checks_memory.check_memory_limit,
    "worker-memory": checks_memory.check_worker_memory,
    "open-files": checks_limits.check_open_files,
    "cpu": checks_limits.check_cpu,
    "start-method": checks_runtime.check_start_method,
    "container": checks_shm.check_container,
    "threads": checks_limits.check_threads,
    "kernel-log": checks_runtime.check_kernel_log,
    "oom-priority": checks_runtime.check_oom_priority,
    "versions": checks_runtime.check_versions,
    "dependencies": checks_imports.check_dependencies,
}


def run_env_checks(
    target: object | None = None,
    batch_size: int | None = None,
    num_workers: int | None = None,
    prefetch_factor: int | None = None,
    probe_timeout_s: float = 8.0,
) -> EnvReport:
    """Run every check of the catalog. ``target``: a dataset or DataLoader, or a spec string.

    A spec that does not load because a module it imports is missing is a failed
    ``dependencies`` check (the machine's checks still run); any other bad spec raises
    ``SpecError``.
    """
    label, dataset, imports = _load_target(target)
    machine = probe_machine()
    parts = loader_parts(dataset, batch_size) if dataset is not None else None
    settings = _settings(machine, parts, batch_size, num_workers, prefetch_factor)
    probe = run_load_probe(parts, timeout_s=probe_timeout_s) if parts else None
    inputs = Inputs(machine, settings, probe, num_workers, imports)
    internal_errors: list[str] = []
    if probe is not None and probe.internal_error is not None:
        logger.error("loaderdoctor env: the load probe failed: %s", probe.internal_error)
        internal_errors.append(f"load probe: {probe.internal_error}")
    checks = [_run_check(spec.id, inputs, internal_errors) for spec in CATALOG]
    settings_json = {
        "batch_size": settings.batch_size,
        "num_workers": settings.num_workers,
        "prefetch_factor": settings.prefetch_factor,
        "assumed": settings.assumed,
    }
    return EnvReport(checks, label, settings_json, internal_errors)


def _load_target(target: object | None) -> tuple[str | None, object | None, TargetImports | None]:
    """``(label, dataset, imports)``: the dataset is None when there is none, or it did not load
    for want of a module (``imports.load_error`` says so)."""
    if target is None:
        return None, None, None
    if not isinstance(target, str):
        return type(target).__name__, target, None
    from loaderdoctor.spec import SpecError, load_dataset

    try:
        dataset = load_dataset(target)
    except SpecError as error:
        imports = checks_imports.scan_target(target, load_error=str(error))
        if imports.missing or "ModuleNotFoundError" in str(error):
            return target, None, imports
        raise
    return target, dataset, checks_imports.scan_target(target)


def _run_check(check_id: str, inputs: Inputs, internal_errors: list[str]) -> EnvCheck:
    """``CHECKS[check_id](inputs)``; a bug of ours in one check is logged, counted in the report
    and makes that check "unknown", not the whole command an internal error."""
    try:
        return CHECKS[check_id](inputs)
    except Exception as error:  # one check's bug must not end the command
        logger.exception("loaderdoctor env: the %s check failed", check_id)
        line = f"{check_id}: {type(error).__name__}: {error}"
        internal_errors.append(line)
        return make_check(
            check_id,
            "unknown",
            None,
            f"loaderdoctor failed to measure this ({type(error).__name__}: {error}); "
            "please report it",
        )


def _settings(
    machine: Machine,
    parts: LoaderParts | None,
    batch_size: int | None,
    num_workers: int | None,
    prefetch_factor: int | None,
) -> Settings:
    assumed: list[str] = []
    if num_workers is None and parts is not None and parts.is_dataloader:
        num_workers = parts.num_workers
    if num_workers is None:
        # what people set when they do not know better: one worker per usable core
        num_workers = machine.cpu.usable_cores or 1
        assumed.append("num_workers")
    if prefetch_factor is None and parts is not None and parts.prefetch_factor:
        prefetch_factor = parts.prefetch_factor
    if prefetch_factor is None:
        prefetch_factor = 2  # torch's default
        assumed.append("prefetch_factor")
    if parts is not None:
        batch_size = parts.batch_size
        if batch_size is not None and not parts.is_dataloader and batch_size == 1:
            assumed.append("batch_size")
    return Settings(batch_size, num_workers, prefetch_factor, assumed)
