"""Host memory and swap from ``/proc/meminfo``."""

from __future__ import annotations

from dataclasses import dataclass

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
        return HostMemory(None, None, None, None, result.error)
    return host_memory_from_meminfo(result.text)


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
