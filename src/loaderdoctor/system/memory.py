"""Host memory and swap from ``/proc/meminfo`` (psutil where there is no /proc), peak RSS."""

from __future__ import annotations

import sys
from dataclasses import dataclass

import psutil

from loaderdoctor.system._files import read_text


@dataclass(frozen=True)
class HostMemory:
    total_bytes: int | None
    available_bytes: int | None
    swap_total_bytes: int | None
    swap_free_bytes: int | None
    note: str | None = None


def parse_meminfo(text: str) -> dict[str, int]:
    """``/proc/meminfo`` as bytes per key (``MemTotal: 24683656 kB`` -> ``{"MemTotal": ...}``)."""
    values: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if not parts:
            continue
        try:
            number = int(parts[0])
        except ValueError:
            continue
        unit = parts[1].lower() if len(parts) > 1 else ""
        values[key.strip()] = number * 1024 if unit == "kb" else number
    return values


def host_memory_from_meminfo(text: str) -> HostMemory:
    values = parse_meminfo(text)
    missing = [key for key in ("MemTotal", "MemAvailable") if key not in values]
    return HostMemory(
        total_bytes=values.get("MemTotal"),
        available_bytes=values.get("MemAvailable"),
        swap_total_bytes=values.get("SwapTotal"),
        swap_free_bytes=values.get("SwapFree"),
        note=f"/proc/meminfo lacks {', '.join(missing)}" if missing else None,
    )


def host_memory(path: str = "/proc/meminfo") -> HostMemory:
    result = read_text(path)
    if result.text is None:
        return _host_memory_from_psutil(result.error)
    return host_memory_from_meminfo(result.text)


def _host_memory_from_psutil(why: str | None) -> HostMemory:
    """macOS and Windows have no /proc/meminfo; psutil asks their kernels instead."""
    try:
        memory, swap = psutil.virtual_memory(), psutil.swap_memory()
    except (OSError, RuntimeError) as error:
        return HostMemory(None, None, None, None, f"{why}; psutil: {error}")
    return HostMemory(
        int(memory.total), int(memory.available), int(swap.total), int(swap.free), None
    )


def own_rss_bytes() -> int | None:
    """This process's resident set, from psutil (for platforms without /proc/self/statm)."""
    try:
        return int(psutil.Process().memory_info().rss)
    except (psutil.Error, OSError):
        return None


def peak_rss_bytes() -> int | None:
    """This process's peak resident set (``ru_maxrss``; the peak working set on Windows)."""
    try:
        import resource
    except ImportError:
        info = psutil.Process().memory_info()
        peak = getattr(info, "peak_wset", None)  # Windows
        return int(peak) if peak is not None else None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak) if sys.platform == "darwin" else int(peak) * 1024  # macOS: bytes, else KiB


def host_oom_kills(path: str = "/proc/vmstat") -> int | None:
    """The kernel's machine-wide OOM kill counter (``oom_kill`` in /proc/vmstat, Linux 4.13+)."""
    try:
        with open(path) as handle:
            for line in handle:
                if line.startswith("oom_kill "):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None
