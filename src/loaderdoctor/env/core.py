"""``env``'s core: measure the machine (and, with a target, the dataset) against the check catalog.

No torch import unless a target is given, so ``loaderdoctor env`` answers in well under a second.
"""

from __future__ import annotations

from loaderdoctor.env.catalog import CATALOG, EnvCheck, EnvReport
from loaderdoctor.env.checks_limits import check_cpu, check_open_files, check_threads
from loaderdoctor.env.checks_memory import check_memory_limit, check_worker_memory
from loaderdoctor.env.checks_runtime import check_kernel_log, check_start_method, check_versions
from loaderdoctor.env.checks_shm import check_container, check_shm_need, check_shm_size
from loaderdoctor.env.facts import Machine, Settings, probe_machine
from loaderdoctor.env.probe import LoaderParts, loader_parts, run_load_probe


def run_env_checks(
    target: object | None = None,
    batch_size: int | None = None,
    num_workers: int | None = None,
    prefetch_factor: int | None = None,
    probe_timeout_s: float = 8.0,
) -> EnvReport:
    """Run every check of the catalog. ``target``: a dataset or DataLoader, or a spec string."""
    label: str | None = None
    if isinstance(target, str):
        from loaderdoctor.spec import load_dataset

        label, target = target, load_dataset(target)
    elif target is not None:
        label = type(target).__name__
    machine = probe_machine()
    parts = loader_parts(target, batch_size) if target is not None else None
    settings = _settings(machine, parts, batch_size, num_workers, prefetch_factor)
    probe = run_load_probe(parts, timeout_s=probe_timeout_s) if parts else None

    checks: dict[str, EnvCheck] = {}
    checks["shm-size"] = check_shm_size(machine)
    checks["shm-need"] = check_shm_need(machine, settings, probe)
    checks["memory-limit"] = check_memory_limit(machine)
    checks["worker-memory"] = check_worker_memory(machine, settings, probe)
    checks["open-files"] = check_open_files(machine, settings, probe)
    checks["cpu"] = check_cpu(machine, num_workers)
    checks["start-method"] = check_start_method(probe)
    checks["container"] = check_container(machine, settings, probe)
    checks["threads"] = check_threads(machine, settings)
    checks["kernel-log"] = check_kernel_log(machine)
    checks["versions"] = check_versions()
    settings_json = {
        "batch_size": settings.batch_size,
        "num_workers": settings.num_workers,
        "prefetch_factor": settings.prefetch_factor,
        "assumed": settings.assumed,
    }
    return EnvReport([checks[spec.id] for spec in CATALOG], label, settings_json)


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
