"""Bytes and durations, read from a command line and written for people: the one place for both.

Binary units throughout (``MiB``, ``GiB``): what ``free -m``, cgroups and ``docker --shm-size``
count in.
"""

from __future__ import annotations

import re

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB
TiB = 1024 * GiB

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": KiB, "m": MiB, "g": GiB, "t": TiB}


def parse_size(text: str) -> int:
    """``"600M"``, ``"1.5GiB"``, ``"2g"``, ``"1048576"`` -> bytes (binary units); ValueError else."""
    match = _SIZE.match(text)
    if match is None:
        raise ValueError(f"not a size: {text!r} (expected e.g. 600M, 1.5G, 2GiB or bytes)")
    number, unit, _suffix = match.groups()
    value = int(float(number) * _UNITS[unit.lower()])
    if value <= 0:
        raise ValueError(f"not a size: {text!r} (must be more than 0 bytes)")
    return value


def format_bytes(count: float | None, *, trim: bool = False) -> str:
    """``67108864`` -> ``"64.0 MiB"`` (``trim``: ``"64 MiB"``, as a user would type it back).

    One decimal above a KiB, so that ``1.5 GiB`` keeps its half; ``None`` (not measured) reads
    ``"unknown"``.
    """
    if count is None:
        return "unknown"
    value, unit = float(count), "B"
    for bigger in ("KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024:
            break
        value, unit = value / 1024, bigger
    if unit == "B":
        return f"{value:.0f} B"
    text = f"{value:.1f}"
    if trim and text.endswith(".0"):
        text = text[:-2]
    return f"{text} {unit}"


def format_mib(count: float, *, signed: bool = False, decimals: int = 0) -> str:
    """A number of MiB for a column headed "MiB": ``format_mib(3 * MiB)`` -> ``"3"``."""
    sign = "+" if signed else ""
    return f"{count / MiB:{sign}.{decimals}f}"


def format_seconds(seconds: float, *, decimals: int = 1) -> str:
    """``4.23`` -> ``"4.2 s"``."""
    return f"{seconds:.{decimals}f} s"


def shortened(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, ``...`` ending what was cut."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def format_ms(seconds: float, *, decimals: int = 1) -> str:
    """Seconds as a number of milliseconds for a column headed "ms": ``0.0125`` -> ``"12.5"``."""
    return f"{seconds * 1000:.{decimals}f}"
