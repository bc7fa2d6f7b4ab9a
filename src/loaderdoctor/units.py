"""Sizes as people write them on a command line (``--mem-limit 2G``, ``--mem-budget 600M``)."""

from __future__ import annotations

import re

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}


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
