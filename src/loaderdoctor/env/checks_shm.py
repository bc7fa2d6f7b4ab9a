"""``env``'s shared-memory checks: the size of /dev/shm, what the batches in flight need of it,
and the container runtime that sized it.
"""

from __future__ import annotations

import math

from loaderdoctor.env.facts import Inputs, Machine, no_target, probe_failed
from loaderdoctor.env.findings import EnvCheck, Status, make_check
from loaderdoctor.system.shm import CONTAINER_DEFAULT_SHM_BYTES
from loaderdoctor.units import GiB, MiB, format_bytes

# A batch being consumed by the main process and the one a worker is writing are in /dev/shm too.
SHM_HEADROOM = 1.25


def _shm_fix(machine: Machine, need: int | None = None) -> str | None:
    """The exact flag for this container runtime; ``None``: the catalog's general fix."""
    suggested = max(GiB, math.ceil(2 * need / GiB) * GiB) if need else 2 * GiB
    size = f"{suggested // GiB}g"
    runtime = machine.container.runtime
    if runtime == "kubernetes":
        return (
            "Mount a memory-backed emptyDir at /dev/shm: volumes: [{name: dshm, emptyDir: "
            f"{{medium: Memory, sizeLimit: {size[:-1]}Gi}}}}], volumeMounts: "
            "[{name: dshm, mountPath: /dev/shm}]."
        )
    if runtime in ("docker", "podman"):
        return (
            f"Restart the container with `{runtime} run --shm-size={size} ...` "
            f"(compose: `shm_size: {size}`)."
        )
    return None


def check_shm_size(inputs: Inputs) -> EnvCheck:
    machine = inputs.machine
    shm = machine.shm
    details = {"path": shm.path, "total_bytes": shm.total_bytes, "free_bytes": shm.free_bytes}
    if shm.total_bytes is None or shm.free_bytes is None:
        return make_check(
            "shm-size", "unknown", None, f"cannot measure {shm.path}: {shm.note}", details
        )
    text = f"{shm.path}: {format_bytes(shm.total_bytes)} total, {format_bytes(shm.free_bytes)} free"
    status: Status = "pass"
    if shm.total_bytes <= CONTAINER_DEFAULT_SHM_BYTES * 1.1:
        status, text = "fail", f"{text}: the 64 MiB container default, too small for most loaders"
    elif shm.free_bytes < 512 * MiB or shm.total_bytes < GiB:
        status, text = "warn", f"{text}: little room for batches in flight"
    return make_check("shm-size", status, shm.total_bytes, text, details, _shm_fix(machine))


def check_shm_need(inputs: Inputs) -> EnvCheck:
    machine, settings, probe = inputs.machine, inputs.settings, inputs.probe
    if probe is None:
        return no_target("shm-need", "the bytes of one batch")
    if probe.batch_bytes is None:
        return probe_failed("shm-need", probe)
    in_flight = settings.num_workers * settings.prefetch_factor
    need = int(probe.batch_bytes * in_flight * SHM_HEADROOM)
    free = machine.shm.free_bytes
    details = {
        "batch_bytes": probe.batch_bytes,
        "batches_in_flight": in_flight,
        "need_bytes": need,
        "free_bytes": free,
    }
    text = (
        f"one batch is {format_bytes(probe.batch_bytes)}; {settings.describe()} keeps "
        f"{in_flight} in flight: {format_bytes(need)} with headroom"
    )
    if settings.num_workers == 0:
        return make_check(
            "shm-need", "pass", 0, "num_workers=0: batches never leave the main process", details
        )
    if free is None:
        return make_check("shm-need", "unknown", need, f"{text}; free shm unknown", details)
    status: Status = "pass"
    if need > free:
        status = "fail"
    elif need > free / 2:
        status = "warn"
    text = f"{text} against {format_bytes(free)} free in {machine.shm.path}"
    return make_check(
        "shm-need",
        status,
        need,
        text,
        details,
        _shm_fix(machine, need) if status != "pass" else None,
    )


def check_container(inputs: Inputs) -> EnvCheck:
    machine, settings, probe = inputs.machine, inputs.settings, inputs.probe
    container, shm = machine.container, machine.shm
    details = {"runtime": container.runtime, "evidence": container.evidence}
    if container.runtime is None:
        return make_check(
            "container", "pass", None, "not in a container", details, "Nothing to do."
        )
    text = f"{container.runtime} ({'; '.join(container.evidence)})"
    need = None
    if probe is not None and probe.batch_bytes is not None:
        need = int(
            probe.batch_bytes * settings.num_workers * settings.prefetch_factor * SHM_HEADROOM
        )
    status: Status = "pass"
    if shm.total_bytes is not None and (shm.total_bytes < GiB or (need and need > shm.total_bytes)):
        status = "warn"
        text += f"; its /dev/shm is {format_bytes(shm.total_bytes)}"
    fix = (
        _shm_fix(machine, need)
        or "Give the container a larger /dev/shm with its runtime's shm-size option."
    )
    return make_check("container", status, container.runtime, text, details, fix)
