"""``env``'s checks of the runtime: the start method, the kernel log, the installed versions."""

from __future__ import annotations

import multiprocessing
import os
import platform
import sys

from loaderdoctor.env.facts import Inputs
from loaderdoctor.env.findings import EnvCheck, Status, make_check
from loaderdoctor.system.kmsg import oom_kills
from loaderdoctor.system.oom_priority import (
    PROBE_OOM_SCORE_ADJ,
    WORKER_OOM_SCORE_ADJ,
    oom_protection,
    oom_score_adj,
)
from loaderdoctor.units import format_bytes


def check_start_method(inputs: Inputs) -> EnvCheck:
    probe = inputs.probe
    default = multiprocessing.get_all_start_methods()[0]  # documented: the first is the default
    configured = multiprocessing.get_start_method(allow_none=True)
    method = configured or default
    details = {
        "default": default,
        "configured": configured,
        "python": platform.python_version(),
        "picklable": probe.picklable if probe else None,
        "pickle_bytes": probe.pickle_bytes if probe else None,
    }
    text = f"{method} ({'set explicitly' if configured else f'the default on {sys.platform}, Python {platform.python_version()}'})"
    if sys.platform.startswith("linux") and sys.version_info < (3, 14) and default == "fork":
        text += "; Python 3.14 makes forkserver the default on Linux"
    status: Status = "pass"
    if probe is not None and probe.picklable is False:
        text += f"; the dataset does not pickle ({probe.pickle_error})"
        status = "warn" if method == "fork" else "fail"
    elif probe is not None and probe.picklable:
        text += f"; the dataset pickles ({format_bytes(probe.pickle_bytes)} per worker under spawn/forkserver)"
    return make_check("start-method", status, method, text, details)


def check_kernel_log(inputs: Inputs) -> EnvCheck:
    machine = inputs.machine
    log, cgroup = machine.kernel_log, machine.cgroup
    kills = oom_kills(log.lines)
    details = {
        "source": log.source,
        "records": len(log.lines),
        "oom_kills": len(kills),
        "note": log.note,
    }
    lacking = machine.lacks("the kernel log (/dev/kmsg, dmesg)")
    if not log.readable and lacking is not None and lacking.absent:
        text = (
            f"{lacking.why_not}: a worker killed by SIGKILL cannot be told apart from an OOM "
            "kill here"
        )
        return make_check("kernel-log", "unknown", None, text, details)
    if not log.readable:
        text = f"not readable: {log.note}"
        if cgroup.oom_kill_count is not None:
            text += "; the cgroup's oom_kill counter still tells an OOM kill apart"
        return make_check("kernel-log", "warn", None, text, details)
    text = f"readable from {log.source} ({len(log.lines)} records)"
    if kills:
        last = kills[-1]
        text += f"; {len(kills)} OOM kill(s) on record, the last pid {last.pid} ({last.comm})"
    return make_check("kernel-log", "pass", log.source, text, details)


def check_oom_priority(inputs: Inputs) -> EnvCheck:
    own = oom_score_adj()
    details = {"this_process": own, "workers": WORKER_OOM_SCORE_ADJ, "probes": PROBE_OOM_SCORE_ADJ}
    if own is None:
        text = "no /proc/self/oom_score_adj here: the OOM killer's choice cannot be steered"
        return make_check("oom-priority", "unknown", None, text, details)
    if own >= WORKER_OOM_SCORE_ADJ:
        text = (
            f"this process runs at oom_score_adj {own}, as high as its workers would "
            f"({WORKER_OOM_SCORE_ADJ}): the OOM killer may take the training process first"
        )
        return make_check("oom-priority", "warn", own, text, details)
    text = oom_protection(WORKER_OOM_SCORE_ADJ, PROBE_OOM_SCORE_ADJ, [])
    return make_check("oom-priority", "pass", own, text, details)


def check_versions(inputs: Inputs) -> EnvCheck:
    versions: dict[str, str | None] = {"python": platform.python_version()}
    versions.update(installed_versions(("torch", "numpy", "pillow")))
    text = ", ".join(f"{name} {version or 'not installed'}" for name, version in versions.items())
    status: Status = "pass" if versions["torch"] else "warn"
    return make_check("versions", status, versions, text, versions)


def installed_versions(names: tuple[str, ...]) -> dict[str, str | None]:
    """Versions from the ``NAME-VERSION.dist-info`` folders on sys.path, without importing them.

    Reading folder names costs a millisecond; ``importlib.metadata`` costs some 50 ms to import
    and is only the fallback (egg-info and other layouts).
    """
    found: dict[str, str | None] = dict.fromkeys(names)
    wanted = {name.lower(): name for name in names}
    for entry in sys.path:
        try:
            children = os.listdir(entry or ".")
        except OSError:
            continue
        for child in children:
            if not child.endswith(".dist-info"):
                continue
            name, _, version = child[: -len(".dist-info")].partition("-")
            key = wanted.get(name.lower().replace("_", "-"))
            if key is not None and found[key] is None:
                found[key] = version
        if all(found.values()):
            return found
    missing = [name for name, version in found.items() if version is None]
    if missing:
        import importlib.metadata

        for name in missing:
            try:
                found[name] = importlib.metadata.version(name)
            except importlib.metadata.PackageNotFoundError:
                pass
    return found
