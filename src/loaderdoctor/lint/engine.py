"""Run the rules over sources and paths: parsing, notebooks, ``# noqa``, select and ignore."""

from __future__ import annotations

import ast
import io
import json
import re
import time
import tokenize
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from loaderdoctor.lint import (
    rules_dataset,
    rules_guard,
    rules_loader,
    rules_memory,
    rules_seed,
    rules_silent,
)
from loaderdoctor.lint.catalog import RULES, SEVERITIES
from loaderdoctor.lint.findings import LintFinding, LintReport, Unparsed
from loaderdoctor.lint.model import Hit, ModuleModel
from loaderdoctor.lint.project import PLATFORMS, PendingModule, Project

Check = Callable[[Project], Iterable[Hit]]

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
    "LD110": rules_seed.check_reseed_from_state,
    "LD111": rules_silent.check_distributed_without_set_epoch,
    "LD112": rules_silent.check_unsplit_streams,
    "LD113": rules_silent.check_stale_persistent_attributes,
}
SYNTAX_ERROR = "LD000"
_CODE = re.compile(r"^LD\d{0,3}$")
_NOQA = re.compile(
    r"#\s*noqa(?::[\s]?(?P<codes>[A-Z][0-9]+(?:[,\s]+[A-Z][0-9]+)*))?", re.IGNORECASE
)
_SKIPPED_DIRS = frozenset(
    {".git", ".hg", ".venv", "venv", "__pycache__", "node_modules", ".tox", ".nox", "build", "dist"}
)
# A module none of whose text matches is parsed only if another module imports a name from it:
# no rule can fire in a file that mentions no DataLoader, no Dataset protocol, no worker hook.
_RELEVANT = re.compile(
    r"DataLoader|Dataset|__getitem__|__iter__|setNumThreads|set_start_method|"
    r"multiprocessing_context|get_state\(\)\[1\]"
)
_CLASS = re.compile(r"^[ \t]*class[ \t]+(\w+)[ \t]*\(([^)]*)\)", re.MULTILINE)


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


@dataclass
class _File:
    path: str
    module_name: str
    source: _Source
    notebook: bool
    wanted: bool  # given by name or relevant by its text; else parsed only on demand
    parsed: bool = False
    model: ModuleModel | None = None  # parsed as soon as it was read (start-up)


@dataclass
class _Options:
    select: Sequence[str] | None
    ignore: Sequence[str] | None
    platform: str
    min_severity: str


def check_source(
    source: str,
    path: str = "<string>",
    select: Sequence[str] | None = None,
    ignore: Sequence[str] | None = None,
    notebook: bool = False,
    platform: str = "all",
    min_severity: str = "warning",
) -> list[LintFinding]:
    """Lint one module's source. Fast and torch-free: the run-time explainer calls it too."""
    options = _Options(select, ignore, _checked_platform(platform), min_severity)
    files = [_File(path, Path(path).stem, _Source(source), notebook, True)]
    report = LintReport()
    _check_project(files, options, report)
    return report.findings


def _check_syntax(file: _File, report: LintReport) -> None:
    """Compile a file that no rule needs yet, so that a folder run names every file it could
    not read as Python instead of passing over it in silence. The tree is not kept: holding
    every module's tree made the run slower than parsing the few a rule reaches into twice."""
    try:
        compile(file.source.text, file.path, "exec", ast.PyCF_ONLY_AST, dont_inherit=True)
    except (SyntaxError, ValueError) as error:
        line = getattr(error, "lineno", None) or 1
        message = getattr(error, "msg", None) or str(error)
        report.unparsed.append(Unparsed(file.path, file.source.place(line)[0], message))


def _checked_platform(platform: str) -> str:
    if platform not in PLATFORMS:
        raise ValueError(f"unknown platform {platform!r} (choose from {', '.join(PLATFORMS)})")
    return platform


def _parse(file: _File, options: _Options, report: LintReport) -> ModuleModel | None:
    try:
        tree = ast.parse(file.source.text, filename=file.path)
    except (SyntaxError, ValueError) as error:
        if file.wanted and is_enabled(SYNTAX_ERROR, options.select, options.ignore):
            line = getattr(error, "lineno", None) or 1
            col = getattr(error, "offset", None) or 1
            message = getattr(error, "msg", None) or str(error)
            user_line, cell = file.source.place(line)
            report.findings.append(
                LintFinding(
                    file.path,
                    user_line,
                    col,
                    SYNTAX_ERROR,
                    f"cannot parse: {message}",
                    RULES[SYNTAX_ERROR].fix,
                    cell,
                    RULES[SYNTAX_ERROR].severity,
                )
            )
        return None
    return ModuleModel(tree, file.source.text, file.notebook, file.path, file.module_name)


def _loader_of(
    file: _File, options: _Options, report: LintReport, sources: dict[int, _Source]
) -> Callable[[], ModuleModel | None]:
    """Parse a module the text scan passed over once a name resolves into it. It is one of the
    files being linted, so what the rules find in it (a generator in a helper class) counts."""

    def load() -> ModuleModel | None:
        model = _parse(file, options, report)
        if model is not None:
            sources[id(model)] = file.source
        return model

    return load


def _check_project(files: list[_File], options: _Options, report: LintReport) -> None:
    modules: list[ModuleModel] = []
    sources: dict[int, _Source] = {}
    pending: list[PendingModule] = []
    for file in files:
        if file.wanted:
            model = file.model if file.parsed else _parse(file, options, report)
            if model is not None:
                modules.append(model)
                sources[id(model)] = file.source
        else:
            pending.append(
                PendingModule(
                    file.module_name, _loader_of(file, options, report, sources), file.source.text
                )
            )
    project = Project(modules, pending, options.platform)
    found: dict[tuple[str, int, int, int, str], LintFinding] = {}
    threshold = SEVERITIES.index(options.min_severity)
    noqa: dict[int, dict[int, frozenset[str] | None]] = {}
    for code, check in CHECKS.items():
        if not is_enabled(code, options.select, options.ignore):
            continue
        for hit in check(project):
            model = hit.module
            line = getattr(hit.node, "lineno", 1)
            suppressed = noqa.get(id(model))
            if suppressed is None:
                suppressed = noqa[id(model)] = _noqa_lines(model.source)
            if line in suppressed and _is_suppressed(suppressed[line], hit.code):
                continue
            source = sources[id(model)]
            user_line, cell = source.place(line)
            col = character_column(model.lines, line, getattr(hit.node, "col_offset", 0))
            severity = hit.severity or RULES[hit.code].severity
            if SEVERITIES.index(severity) > threshold:
                report.hidden += 1
                continue
            finding = LintFinding(
                model.path,
                user_line,
                col,
                hit.code,
                hit.message,
                hit.fix or RULES[hit.code].fix,
                cell,
                severity,
            )
            found.setdefault(_sort_key(finding), finding)
    report.findings.extend(found.values())
    report.findings.sort(key=_sort_key)


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
    """Code cells joined into one module, IPython syntax stripped as IPython itself does."""
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
        lines = _strip_magics(text.splitlines())
        cells.append((next_line, cell_number))
        parts.append("\n".join(lines) + "\n")
        next_line += len(lines) or 1
        if not lines:
            parts[-1] = "\n"
    return _Source("".join(parts), tuple(cells))


# Cell magics whose body IPython runs as Python (``%%time``); any other cell magic (``%%bash``,
# ``%%writefile``) makes its body text that is not Python.
_PYTHON_CELL_MAGICS = frozenset({"time", "timeit", "capture", "prun", "debug", "px"})
_CELL_MAGIC = re.compile(r"^\s*%%(\w+)")
# ``files = !ls``, ``out = %sx ls``: IPython assigns the magic's result.
_MAGIC_ASSIGNMENT = re.compile(r"^(\s*)([\w.\[\],\s*]+?)\s*=\s*[!%]")
_HELP = re.compile(r"^\s*(\?{1,2}[\w.]+|[\w.]+\?{1,2})\s*$")


def _strip_magics(lines: list[str]) -> list[str]:
    """Each IPython-only line becomes a statement of the same shape, so line numbers hold."""
    if lines:
        match = _CELL_MAGIC.match(lines[0])
        if match is not None:
            if match.group(1) not in _PYTHON_CELL_MAGICS:
                return [""] * len(lines)
            lines = ["", *lines[1:]]
    stripped: list[str] = []
    continued = False
    for line in lines:
        if continued:  # the rest of a magic continued with a backslash
            stripped.append("")
            continued = line.rstrip().endswith("\\")
            continue
        new = _magic_as_statement(line)
        if new != line:
            continued = line.rstrip().endswith("\\")
        stripped.append(new)
    return stripped


def _magic_as_statement(line: str) -> str:
    """A magic inside a block (``if x:\n  %pip install y``) must stay a statement there."""
    stripped = line.lstrip()
    indent = line[: len(line) - len(stripped)]
    if stripped.startswith(("%", "!")) or _HELP.match(line):
        return f"{indent}pass"
    assignment = _MAGIC_ASSIGNMENT.match(line)
    if assignment is not None:
        return f"{indent}{assignment.group(2).strip()} = None"
    return line


def _module_name(path: Path, root: Path | None) -> str:
    relative = path.relative_to(root) if root is not None else Path(path.name)
    parts = [*relative.parts[:-1], relative.stem]
    if parts and parts[-1] == "__init__":
        parts.pop()
    return ".".join(part for part in parts if part.isidentifier())


def iter_files(paths: Iterable[str | Path]) -> Iterator[tuple[Path, Path | None]]:
    """Files to lint, with the folder they were found in (None for a file given by name)."""
    for raw in paths:
        path = Path(raw)
        if not path.exists():
            raise FileNotFoundError(f"no such file or directory: {raw}")
        if path.is_file():
            yield path, None
            continue
        for child in sorted(path.rglob("*")):
            relative = child.relative_to(path).parts
            if any(part in _SKIPPED_DIRS or part.startswith(".") for part in relative[:-1]):
                continue
            if child.suffix in (".py", ".ipynb") and child.is_file():
                yield child, path


# A folder holding one of these is the root of a project (a repository checkout).
_PROJECT_MARKERS = (
    ".git",
    "setup.py",
    "setup.cfg",
    "pyproject.toml",
    "requirements.txt",
    "README.md",
    "README.rst",
    "README",
    "LICENSE",
    "LICENSE.md",
    "LICENSE.txt",
)


class _Roots:
    """Which project each file belongs to, so that two repositories side by side in one folder
    (two top-level ``dataset.py``) are two projects whose modules never resolve into each other.

    A folder given on the command line that is inside a project (a marker in it or above it) is
    that project; a folder outside any project is split at the outermost project folders below
    it. Module names are dotted paths from the project root, as the project's imports spell them.
    """

    def __init__(self) -> None:
        self._marked: dict[Path, bool] = {}
        self._above: dict[Path, Path | None] = {}

    def _is_root(self, folder: Path) -> bool:
        known = self._marked.get(folder)
        if known is None:
            known = self._marked[folder] = not (folder / "__init__.py").exists() and any(
                (folder / marker).exists() for marker in _PROJECT_MARKERS
            )
        return known

    def _enclosing(self, folder: Path) -> Path | None:
        """The nearest project root at or above ``folder``."""
        if folder not in self._above:
            found = next((f for f in (folder, *folder.parents) if self._is_root(f)), None)
            self._above[folder] = found
        return self._above[folder]

    def of(self, path: Path, given: Path | None) -> tuple[Path | None, Path | None]:
        """(project root or None when there is none, folder module names are relative to)."""
        start = (given or path.parent).resolve()
        enclosing = self._enclosing(start)
        if enclosing is not None:
            return enclosing, enclosing
        if given is None:
            return None, None
        for folder in reversed(path.resolve().parents):  # outermost first
            if folder != start and start in folder.parents and self._is_root(folder):
                return folder, folder
        return None, start


def check_paths(
    paths: Iterable[str | Path],
    select: Sequence[str] | None = None,
    ignore: Sequence[str] | None = None,
    platform: str = "all",
    min_severity: str = "warning",
) -> LintReport:
    """Lint files and folders as one project. Raises FileNotFoundError for a missing path.

    Findings below ``min_severity`` are counted in ``report.hidden``, not listed.
    """
    started = time.perf_counter()
    options = _Options(select, ignore, _checked_platform(platform), min_severity)
    report = LintReport()
    projects: dict[Path | None, list[_File]] = {}
    roots = _Roots()
    for path, given in iter_files(paths):
        name = str(path)
        try:
            source, notebook = read_source(path)
        except (UnicodeDecodeError, SyntaxError, ValueError, OSError) as error:
            if is_enabled(SYNTAX_ERROR, select, ignore):
                rule = RULES[SYNTAX_ERROR]
                report.findings.append(
                    LintFinding(
                        name,
                        1,
                        1,
                        SYNTAX_ERROR,
                        f"cannot read: {error}",
                        rule.fix,
                        None,
                        rule.severity,
                    )
                )
            continue
        report.files_checked += 1
        report.lines_checked += source.text.count("\n") + 1
        wanted = given is None or notebook or bool(_RELEVANT.search(source.text))
        project, base = roots.of(path, given)
        module_name = _module_name(path.resolve() if base else path, base)
        file = _File(name, module_name, source, notebook, wanted)
        if wanted:  # parse while the next files are read: the first finding comes sooner
            file.model, file.parsed = _parse(file, options, report), True
        else:
            _check_syntax(file, report)
        projects.setdefault(project, []).append(file)
    for files in projects.values():
        _mark_subclass_modules(files)
        _mark_importers(files)
        _check_project(files, options, report)
    report.findings.sort(key=_sort_key)
    report.seconds = time.perf_counter() - started
    return report


_IMPORTED = re.compile(r"^[ \t]*(?:from[ \t]+([\w.]+)[ \t]+import|import[ \t]+([\w.]+))", re.M)
# A call made at import time: a statement at column 0 that calls something (`fit(model)`).
_TOP_LEVEL_CALL = re.compile(r"^(?:[A-Za-z_][\w.]*[ \t]*=[ \t]*)?[A-Za-z_][\w.]*\(", re.M)


def _mark_importers(files: list[_File]) -> None:
    """A script that calls something at import time and imports a relevant module, directly or
    through modules that import one (``import pipeline.steps as pipe`` where steps imports the
    module that builds the DataLoader), is relevant: the function it calls may start DataLoader
    workers (LD101 through imported functions). The modules in between stay unparsed until a
    name resolves into them."""
    imports = {
        id(file): {
            (match.group(1) or match.group(2) or "").rpartition(".")[2]
            for match in _IMPORTED.finditer(file.source.text)
        }
        for file in files
    }
    leading = {file.module_name.rpartition(".")[2] for file in files if file.wanted}
    changed = True
    while changed:  # names of modules that reach a relevant module by their imports
        changed = False
        for file in files:
            name = file.module_name.rpartition(".")[2]
            if name not in leading and imports[id(file)] & leading:
                leading.add(name)
                changed = True
    for file in files:
        if file.wanted or not _TOP_LEVEL_CALL.search(file.source.text):
            continue
        if imports[id(file)] & leading:
            file.wanted = True


def _mark_subclass_modules(files: list[_File]) -> None:
    """A module whose class derives from a class of a relevant module is relevant too."""
    classes = {id(file): _CLASS.findall(file.source.text) for file in files if not file.wanted}
    known = {name for file in files if file.wanted for name, _ in _CLASS.findall(file.source.text)}
    changed = True
    while changed:
        changed = False
        for file in files:
            if file.wanted:
                continue
            found = classes[id(file)]
            bases = {base.strip().split(".")[-1] for _, text in found for base in text.split(",")}
            if bases & known:
                file.wanted = True
                known.update(name for name, _ in found)
                changed = True
