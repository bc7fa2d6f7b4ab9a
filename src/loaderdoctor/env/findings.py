"""What ``env`` returns: an ``EnvCheck`` per catalog row, in an ``EnvReport`` (JSON both ways)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from loaderdoctor.env.catalog import CATALOG_BY_ID

SCHEMA_VERSION = 1

Status = Literal["pass", "warn", "fail", "unknown"]
STATUSES: tuple[Status, ...] = ("pass", "warn", "fail", "unknown")

JsonValue = Any  # what json.dumps accepts


@dataclass
class EnvCheck:
    id: str
    status: Status
    value: JsonValue  # the main measurement (bytes, a count, a name) or None
    message: str  # what was measured, in one or two sentences
    fix: str
    title: str = ""
    why: str = ""
    details: dict[str, JsonValue] = field(default_factory=dict)

    def to_dict(self) -> dict[str, JsonValue]:
        return {
            "id": self.id,
            "status": self.status,
            "value": self.value,
            "message": self.message,
            "fix": self.fix,
            "title": self.title,
            "why": self.why,
            "details": dict(self.details),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, JsonValue]) -> EnvCheck:
        status = data["status"]
        if status not in STATUSES:
            raise ValueError(f"unknown env check status {status!r}")
        return cls(
            id=str(data["id"]),
            status=cast(Status, status),
            value=data.get("value"),
            message=str(data.get("message", "")),
            fix=str(data.get("fix", "")),
            title=str(data.get("title", "")),
            why=str(data.get("why", "")),
            details=dict(data.get("details") or {}),
        )


@dataclass
class EnvReport:
    checks: list[EnvCheck]
    target: str | None = None
    settings: dict[str, JsonValue] = field(default_factory=dict)
    # loaderdoctor's own failures while measuring (a bug: "please report"), one line each; the
    # check they hit reads "unknown" and says so
    internal_errors: list[str] = field(default_factory=list)
    schema: int = SCHEMA_VERSION

    def counts(self) -> dict[Status, int]:
        counts: dict[Status, int] = dict.fromkeys(STATUSES, 0)
        for check in self.checks:
            counts[check.status] += 1
        return counts

    @property
    def failed(self) -> bool:
        return any(check.status == "fail" for check in self.checks)

    def check(self, check_id: str) -> EnvCheck:
        for check in self.checks:
            if check.id == check_id:
                return check
        raise KeyError(check_id)

    def to_json(self, indent: int | None = 2) -> str:
        """The report as JSON text; ``to_dict()`` gives the dict."""
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_json(cls, text: str) -> EnvReport:
        """Read back what :meth:`to_json` wrote."""
        return cls.from_dict(json.loads(text))

    def to_dict(self) -> dict[str, JsonValue]:
        return {
            "schema": self.schema,
            "target": self.target,
            "settings": dict(self.settings),
            "summary": self.counts(),
            "checks": [check.to_dict() for check in self.checks],
            "internal_errors": list(self.internal_errors),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, JsonValue]) -> EnvReport:
        schema = int(data.get("schema", 0))
        if schema != SCHEMA_VERSION:
            raise ValueError(f"env report schema {schema} is not {SCHEMA_VERSION}")
        return cls(
            checks=[EnvCheck.from_dict(item) for item in data.get("checks", [])],
            target=data.get("target"),
            settings=dict(data.get("settings") or {}),
            internal_errors=[str(line) for line in data.get("internal_errors") or []],
            schema=schema,
        )


def make_check(
    check_id: str,
    status: Status,
    value: JsonValue,
    message: str,
    details: Mapping[str, JsonValue] | None = None,
    fix: str | None = None,
) -> EnvCheck:
    """A result for catalog row ``check_id``; ``fix`` overrides the catalog's when more exact."""
    spec = CATALOG_BY_ID[check_id]
    return EnvCheck(
        id=check_id,
        status=status,
        value=value,
        message=message,
        fix=fix if fix is not None else spec.fix,
        title=spec.title,
        why=spec.why,
        details=dict(details or {}),
    )
