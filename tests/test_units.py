"""``units``: the one parser and the one formatter of sizes and durations."""

from __future__ import annotations

import pytest

from loaderdoctor.units import (
    GiB,
    MiB,
    format_bytes,
    format_mib,
    format_ms,
    format_seconds,
    parse_size,
)


def test_format_bytes() -> None:
    assert format_bytes(512) == "512 B"
    assert format_bytes(64 * MiB) == "64.0 MiB"
    assert format_bytes(3 * 1024**4) == "3.0 TiB"
    assert format_bytes(None) == "unknown"
    assert format_bytes(512 * MiB, trim=True) == "512 MiB"
    assert format_bytes(1536 * MiB, trim=True) == "1.5 GiB"


@pytest.mark.parametrize("text", ["512M", "1.5G", "2GiB", str(3 * MiB)])
def test_parse_size_reads_what_format_bytes_writes(text: str) -> None:
    size = parse_size(text)
    assert parse_size(format_bytes(size, trim=True).replace(" ", "")) == size


def test_columns_and_durations() -> None:
    assert format_mib(3 * MiB) == "3"
    assert format_mib(-MiB // 2, signed=True, decimals=1) == "-0.5"
    assert format_mib(GiB, signed=True) == "+1024"
    assert format_ms(0.0125) == "12.5"
    assert format_seconds(4.23) == "4.2 s"
    assert format_seconds(0.5, decimals=2) == "0.50 s"
