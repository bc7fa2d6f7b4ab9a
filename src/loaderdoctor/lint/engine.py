"""Run the rules over sources and paths: parsing, notebooks, ``# noqa``, select and ignore."""

from __future__ import annotations

import ast
import io
import json
import re
import tokenize
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from loaderdoctor.lint import rules_dataset, rules_guard, rules_loader, rules_memory
from loaderdoctor.lint.catalog import RULES
from loaderdoctor.lint.findings import LintFinding, LintReport
from loaderdoctor.lint.model import Hit, ModuleModel

Check = Callable[[ModuleModel], Iterable[Hit]]

CHECKS: dict[str, Check] = {
    "LD101": rules_guard.check_main_guard,
    "LD102": rules_loader.check_unpicklable,
    "LD103": rules_dataset.check_cuda_in_workers,
    "LD104": rules_loader.check_loader_in_loop,
    "LD105": rules_loader.check_worker_options,
    "LD106": rules_dataset.check_shared_handles,
    "LD107": rules_memory.check_python_object_tables,
    "LD108": rules_dataset.check_opencv_threads,
    "LD109": rules_dataset.check_copied_generators,
}
SYNTAX_ERROR = "LD000"
_CODE = re.compile(r"^LD\d{0,3}$")
_NOQA = re.compile(
    r"#\s*noqa(?::[\s]?(?P<codes>[A-Z][0-9]+(?:[,\s]+[A-Z][0-9]+)*))?", re.IGNORECASE
)
_SKIPPED_DIRS = frozenset(
    {".git", ".hg", ".venv", "venv", "__pycache__", "node_modules", ".tox", ".nox", "build", "dist"}
)


def is_valid_code(code: str) -> bool:
    """``LD``, ``LD1``, ``LD10`` and ``LD101`` are valid select/ignore entries."""
    return bool(_CODE.match(code))


def is_enabled(code: str, select: Sequence[str] | None, ignore: Sequence[str] | None) -> bool:
    """Prefix matching, like flake8. LD000 (unreadable file) is only dropped by ``ignore``."""
    if ignore and any(code.startswith(prefix) for prefix in ignore):
        return False
    if code == SYNTAX_ERROR or not select:
        return True
    return any(code.startswith(prefix) for prefix in select)


@dataclass(frozen=True)
class _Source:
    text: str
    cells: tuple[tuple[int, int], ...] = ()  # (first line in text, cell number) per code cell

    def place(self, line: int) -> tuple[int, int | None]:
        """The line as the user sees it: (line in the cell, cell number) for notebooks."""
        for first_line, cell in reversed(self.cells):
            if line >= first_line:
                return line - first_line + 1, cell
        return line, None


def check_source(
    source: str,
    path: str = "<string>",
    select: Sequence[str] | None = None,
    ignore: Sequence[str] | None = None,
    notebook: bool = False,
) -> list[LintFinding]:
    """Lint one module's source. Fast and torch-free: the run-time explainer calls it too."""
    return _check(_Source(source), path, select, ignore, notebook)


def _check(
    source: _Source,
    path: str,
    select: Sequence[str] | None,
    ignore: Sequence[str] | None,
    notebook: bool,
) -> list[LintFinding]:
    try:
        tree = ast.parse(source.text, filename=path)
    except (SyntaxError, ValueError) as error:
        if not is_enabled(SYNTAX_ERROR, select, ignore):
            return []
        line = getattr(error, "lineno", None) or 1
        col = getattr(error, "offset", None) or 1
        message = getattr(error, "msg", None) or str(error)
        user_line, cell = source.place(line)
        return [
            LintFinding(
                path,
                user_line,
                col,
                SYNTAX_ERROR,
                f"cannot parse: {message}",
                RULES[SYNTAX_ERROR].fix,
                cell,
            )
        ]
    model = ModuleModel(tree, source.text, notebook=notebook)
    lines = source.text.splitlines()
    suppressed = _noqa_lines(source.text)
    findings: set[LintFinding] = set()
    for code, check in CHECKS.items():
        if not is_enabled(code, select, ignore):
            continue
        for hit in check(model):
            line = getattr(hit.node, "lineno", 1)
            if line in suppressed and _is_suppressed(suppressed[line], hit.code):
                continue
            user_line, cell = source.place(line)
            col = character_column(lines, line, getattr(hit.node, "col_offset", 0))
            fix = hit.fix or RULES[hit.code].fix
            findings.add(LintFinding(path, user_line, col, hit.code, hit.message, fix, cell))
    return sorted(findings, key=_sort_key)


def _sort_key(finding: LintFinding) -> tuple[str, int, int, int, str]:
    return (finding.path, finding.cell or 0, finding.line, finding.col, finding.code)


def character_column(lines: list[str], line: int, byte_offset: int) -> int:
    """ast gives UTF-8 byte offsets; users count characters, from 1 like flake8."""
    if 0 < line <= len(lines):
        return len(lines[line - 1].encode("utf-8")[:byte_offset].decode("utf-8", "replace")) + 1
    return byte_offset + 1


def _noqa_lines(text: str) -> dict[int, frozenset[str] | None]:
    """Line -> codes suppressed there (None: every code, a bare ``# noqa``)."""
    if "noqa" not in text.lower():
        return {}
    found: dict[int, frozenset[str] | None] = {}
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError):
        return found
    for token in tokens:
        if token.type != tokenize.COMMENT:
            continue
        match = _NOQA.search(token.string)
        if match is None:
            continue
        codes = match.group("codes")
        line = token.start[0]
        if codes is None:
            found[line] = None
        else:
            found[line] = frozenset(re.split(r"[,\s]+", codes.upper().strip()))
    return found


def _is_suppressed(codes: frozenset[str] | None, code: str) -> bool:
    if codes is None:
        return True  # a bare noqa comment silences every code on the line
    return any(code.startswith(prefix) for prefix in codes)


def read_source(path: Path) -> tuple[_Source, bool]:
    """The Python text of a file (``.ipynb``: its code cells), and whether it is a notebook."""
    raw = path.read_bytes()
    if path.suffix == ".ipynb":
        return _notebook_source(json.loads(raw.decode("utf-8"))), True
    encoding, _ = tokenize.detect_encoding(io.BytesIO(raw).readline)
    return _Source(raw.decode(encoding)), False


def _notebook_source(notebook: dict[str, object]) -> _Source:
    """Code cells joined into one module; IPython magics and shell lines become blank lines."""
    parts: list[str] = []
    cells: list[tuple[int, int]] = []
    next_line = 1
    raw_cells = notebook.get("cells", [])
    for cell in raw_cells if isinstance(raw_cells, list) else []:
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        cell_number = len(cells) + 1
        text = cell.get("source", "")
        text = "".join(text) if isinstance(text, list) else str(text)
        lines = text.splitlines()
        if lines and lines[0].lstrip().startswith("%%"):
            lines = [""] * len(lines)  # a cell magic: the body is not Python
        lines = ["" if line.lstrip().startswith(("%", "!")) else line for line in lines]
        cells.append((next_line, cell_number))
        parts.append("\n".join(lines) + "\n")
        next_line += len(lines) or 1
        if not lines:
            parts[-1] = "\n"
    return _Source("".join(parts), tuple(cells))


def iter_files(paths: Iterable[str | Path]) -> Iterator[Path]:
    """Files to lint: explicit files as given, folders searched for ``.py`` and ``.ipynb``."""
    for raw in paths:
        path = Path(raw)
        if not path.exists():
            raise FileNotFoundError(f"no such file or directory: {raw}")
        if path.is_file():
            yield path
            continue
        for child in sorted(path.rglob("*")):
            relative = child.relative_to(path).parts
            if any(part in _SKIPPED_DIRS or part.startswith(".") for part in relative[:-1]):
                continue
            if child.suffix in (".py", ".ipynb") and child.is_file():
                yield child


def check_paths(
    paths: Iterable[str | Path],
    select: Sequence[str] | None = None,
    ignore: Sequence[str] | None = None,
) -> LintReport:
    """Lint files and folders. Raises FileNotFoundError for a path that does not exist."""
    report = LintReport()
    for path in iter_files(paths):
        name = str(path)
        try:
            source, notebook = read_source(path)
        except (UnicodeDecodeError, SyntaxError, ValueError) as error:
            if is_enabled(SYNTAX_ERROR, select, ignore):
                report.findings.append(
                    LintFinding(
                        name, 1, 1, SYNTAX_ERROR, f"cannot read: {error}", RULES[SYNTAX_ERROR].fix
                    )
                )
            continue
        report.files_checked += 1
        report.lines_checked += source.text.count("\n") + 1
        report.findings.extend(_check(source, name, select, ignore, notebook))
    report.findings.sort(key=_sort_key)
    return report
