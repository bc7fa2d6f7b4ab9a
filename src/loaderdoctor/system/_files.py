"""Small readers shared by the probes: never raise for a missing file or a permission error."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ReadResult:
    text: str | None
    error: str | None  # why ``text`` is None: "no such file", "permission denied", ...


def read_text(path: str) -> ReadResult:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return ReadResult(handle.read(), None)
    except FileNotFoundError:
        return ReadResult(None, f"{path}: no such file")
    except PermissionError:
        return ReadResult(None, f"{path}: permission denied")
    except OSError as error:
        return ReadResult(None, f"{path}: {error.strerror or error}")


def parse_int(text: str | None) -> int | None:
    """An integer file (``memory.limit_in_bytes``, ``cpu.cfs_quota_us``); ``None`` if it is not one."""
    if text is None:
        return None
    try:
        return int(text.strip().split()[0])
    except (ValueError, IndexError):
        return None


def parse_key_values(text: str) -> dict[str, int]:
    """``key value`` lines (``memory.events``, ``memory.oom_control``, ``memory.stat``)."""
    values: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2:
            try:
                values[parts[0]] = int(parts[1])
            except ValueError:
                continue
    return values


def join_notes(*notes: str | None) -> str | None:
    kept = [note for note in notes if note]
    return "; ".join(kept) if kept else None
