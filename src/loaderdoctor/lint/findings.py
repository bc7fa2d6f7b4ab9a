"""The data the linter returns: findings, fixes and the report that holds them."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

SCHEMA = 1


@dataclass(frozen=True, order=True)
class LintFinding:
    """One problem at one place. ``cell`` is the notebook code cell (1-based) for ``.ipynb``."""

    path: str
    line: int
    col: int
    code: str
    message: str
    fix: str
    cell: int | None = None
    severity: str = "warning"  # error, warning or info (loaderdoctor.lint.catalog.SEVERITIES)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "path": self.path,
            "line": self.line,
            "col": self.col,
            "code": self.code,
            "severity": self.severity,
            "message": self.message,
            "fix": self.fix,
        }
        if self.cell is not None:
            data["cell"] = self.cell
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LintFinding:
        cell = data.get("cell")
        return cls(
            path=str(data["path"]),
            line=int(data["line"]),
            col=int(data["col"]),
            code=str(data["code"]),
            message=str(data["message"]),
            fix=str(data.get("fix", "")),
            cell=None if cell is None else int(cell),
            severity=str(data.get("severity", "warning")),
        )


@dataclass(frozen=True, order=True)
class FixRecord:
    """One mechanical rewrite that ``--fix`` applied."""

    path: str
    line: int
    code: str
    description: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "line": self.line,
            "code": self.code,
            "description": self.description,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FixRecord:
        return cls(
            path=str(data["path"]),
            line=int(data["line"]),
            code=str(data["code"]),
            description=str(data["description"]),
        )


@dataclass(frozen=True, order=True)
class Unparsed:
    """A file of a folder run that is not Python this interpreter can parse (Python 2, a
    template, a merge conflict), so no rule looked at it; one line of the report names it."""

    path: str
    line: int
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "line": self.line, "message": self.message}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Unparsed:
        return cls(path=str(data["path"]), line=int(data["line"]), message=str(data["message"]))


@dataclass
class LintReport:
    """The result of linting some paths: findings sorted by place, and any fixes applied."""

    findings: list[LintFinding] = field(default_factory=list)
    files_checked: int = 0
    lines_checked: int = 0
    fixed: list[FixRecord] = field(default_factory=list)
    unfixed: list[FixRecord] = field(default_factory=list)  # --fix declined, and why
    hidden: int = 0  # findings below the severity asked for (info, by default)
    unparsed: list[Unparsed] = field(default_factory=list)  # files no rule could look at
    seconds: float = 0.0  # how long the lint took, reading files included

    def count(self, severity: str) -> int:
        return sum(1 for finding in self.findings if finding.severity == severity)

    def fails(self, threshold: str | None) -> bool:
        """Whether a finding at ``threshold`` or worse was found (None: never fail)."""
        if threshold is None:
            return False
        order = ("error", "warning", "info")
        worst = order.index(threshold)
        return any(order.index(finding.severity) <= worst for finding in self.findings)

    def to_json(self, indent: int | None = 2) -> str:
        """The report as JSON text; ``to_dict()`` gives the dict."""
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_json(cls, text: str) -> LintReport:
        """Read back what :meth:`to_json` wrote."""
        return cls.from_dict(json.loads(text))

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "schema": SCHEMA,
            "findings": [finding.to_dict() for finding in self.findings],
            "files_checked": self.files_checked,
            "lines_checked": self.lines_checked,
            "hidden": self.hidden,
            "seconds": round(self.seconds, 3),
        }
        if self.fixed:
            data["fixed"] = [record.to_dict() for record in self.fixed]
        if self.unfixed:
            data["unfixed"] = [record.to_dict() for record in self.unfixed]
        if self.unparsed:
            data["unparsed"] = [item.to_dict() for item in self.unparsed]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LintReport:
        schema = data.get("schema")
        if schema != SCHEMA:
            raise ValueError(f"unsupported lint report schema {schema!r} (expected {SCHEMA})")
        return cls(
            findings=[LintFinding.from_dict(item) for item in data.get("findings", [])],
            fixed=[FixRecord.from_dict(item) for item in data.get("fixed", [])],
            unfixed=[FixRecord.from_dict(item) for item in data.get("unfixed", [])],
            unparsed=[Unparsed.from_dict(item) for item in data.get("unparsed", [])],
            files_checked=int(data.get("files_checked", 0)),
            lines_checked=int(data.get("lines_checked", 0)),
            hidden=int(data.get("hidden", 0)),
            seconds=float(data.get("seconds", 0.0)),
        )
