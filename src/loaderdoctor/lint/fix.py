"""``--fix``: mechanical rewrites by source position, leaving every other byte of the file alone.

LD105: remove worker-only options given with num_workers=0.
LD102: hoist a lambda passed as collate_fn/worker_init_fn to a module-level function.
LD110: reseed a worker from ``torch.initial_seed()`` instead of numpy's own state word.
LD101: move the code that runs at import into ``def main():`` and call it under the main guard,
or say why that would change what the script does.
"""

from __future__ import annotations

import ast
import builtins
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from loaderdoctor.lint.engine import character_column, check_paths, read_source
from loaderdoctor.lint.findings import FixRecord, LintFinding, LintReport
from loaderdoctor.lint.model import LoaderCall, ModuleModel
from loaderdoctor.lint.project import Project
from loaderdoctor.lint.rules_seed import fixed_reseeds, state_reseed

_HOISTABLE = ("collate_fn", "worker_init_fn")
_WORKER_ONLY_OPTIONS = ("prefetch_factor", "persistent_workers", "timeout")
_BUILTINS = frozenset(dir(builtins))


@dataclass(frozen=True)
class _Edit:
    start: int
    end: int
    text: str


class _Offsets:
    """(line, UTF-8 byte column) from ast -> character offset in the source text."""

    def __init__(self, source: str) -> None:
        self.lines = source.splitlines(keepends=True)
        self.starts = [0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line))

    def at(self, line: int, byte_col: int) -> int:
        text = self.lines[line - 1] if line - 1 < len(self.lines) else ""
        return self.starts[line - 1] + len(
            text.encode("utf-8")[:byte_col].decode("utf-8", "replace")
        )

    def start(self, node: ast.AST) -> int:
        return self.at(node.lineno, node.col_offset)  # type: ignore[attr-defined]

    def end(self, node: ast.AST) -> int:
        return self.at(node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined]


def fix_source(
    source: str, findings: Iterable[LintFinding], path: str = "<string>"
) -> tuple[str, list[FixRecord]]:
    """Apply the fixes for these (already filtered, not suppressed) findings to one source."""
    wanted = {(finding.line, finding.col, finding.code) for finding in findings}
    if not wanted:
        return source, []
    model = ModuleModel(ast.parse(source), source, path=path)
    project = Project([model])
    offsets = _Offsets(source)
    lines = source.splitlines()
    edits: list[_Edit] = []
    records: list[FixRecord] = []
    taken = {n.id for n in ast.walk(model.tree) if isinstance(n, ast.Name)} | set(
        model.scopes.bindings(model.tree)
    )

    def reported(node: ast.AST, code: str) -> bool:
        line = node.lineno  # type: ignore[attr-defined]
        return (line, character_column(lines, line, node.col_offset), code) in wanted  # type: ignore[attr-defined]

    for loader in model.loaders:
        removed = [
            keyword
            for option, keyword in loader.keywords.items()
            if option in _WORKER_ONLY_OPTIONS
            and reported(keyword, "LD105")
            and not loader.zero_by_default  # a flag may ask for workers: not mechanical
        ]
        if removed:
            edits.extend(_removals(loader, removed, offsets))
            for keyword in removed:
                text = ast.get_source_segment(source, keyword) or keyword.arg or ""
                records.append(FixRecord(path, keyword.lineno, "LD105", f"removed `{text}`"))
        for parameter in _HOISTABLE:
            holder = loader.keywords.get(parameter)
            function = holder.value if holder is not None else None
            if not isinstance(function, ast.Lambda):
                continue
            if not reported(function, "LD102") or not _hoistable(model, function):
                continue
            name = _unique_name(f"_{parameter}", taken)
            taken.add(name)
            edits.extend(_hoist(model, function, name, source, offsets))
            records.append(
                FixRecord(
                    path,
                    function.lineno,
                    "LD102",
                    f"hoisted the {parameter} lambda to module-level function `{name}`",
                )
            )
    reseeds = [
        argument
        for call in model.calls
        if (argument := state_reseed(model, call)) is not None and reported(call, "LD110")
    ] + [argument for _, call, argument in fixed_reseeds(project) if reported(call, "LD110")]
    edits.extend(_reseed_from_torch(model, reseeds, offsets))
    records.extend(FixRecord(path, a.lineno, "LD110", _RESEEDED) for a in reseeds)
    return _apply(source, edits), records


_RESEEDED = "seeded from `torch.initial_seed()`"


def _reseed_from_torch(
    model: ModuleModel, arguments: list[ast.expr], offsets: _Offsets
) -> list[_Edit]:
    """Each seed argument becomes torch's per-worker seed (base_seed + worker_id, new every
    epoch), cut to the 32 bits numpy accepts; ``import torch`` is added when the module lacks it."""
    if not arguments:
        return []
    imports = model.scopes.imports.items()
    torch_name = next((name for name, origin in imports if origin == "torch"), None)
    edits = []
    if torch_name is None:
        torch_name = "torch"
        statements = [s for s in model.tree.body if isinstance(s, (ast.Import, ast.ImportFrom))]
        line = (statements[-1].end_lineno or 1) if statements else 0  # after the last import
        at = offsets.starts[min(line, len(offsets.starts) - 1)]
        edits.append(_Edit(at, at, "import torch\n"))
    text = f"{torch_name}.initial_seed() % 2**32"
    edits.extend(_Edit(offsets.start(a), offsets.end(a), text) for a in arguments)
    return edits


def _removals(loader: LoaderCall, removed: list[ast.keyword], offsets: _Offsets) -> list[_Edit]:
    """Spans that delete keyword arguments with their commas, merged where they touch."""
    elements: list[ast.expr | ast.keyword] = sorted(
        [*loader.node.args, *loader.node.keywords], key=lambda n: (n.lineno, n.col_offset)
    )
    gone = {id(keyword) for keyword in removed}
    spans: list[tuple[int, int]] = []
    for index, element in enumerate(elements):
        if id(element) not in gone:
            continue
        later = elements[index + 1 :]
        if later and any(id(other) not in gone for other in later):
            spans.append((offsets.start(element), offsets.start(later[0])))
        else:
            kept_before = [other for other in elements[:index] if id(other) not in gone]
            start = offsets.end(kept_before[-1]) if kept_before else offsets.start(element)
            spans.append((start, offsets.end(element)))
    spans.sort()
    merged: list[tuple[int, int]] = []
    for start, end in spans:
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return [_Edit(start, end, "") for start, end in merged]


def _hoistable(model: ModuleModel, function: ast.Lambda) -> bool:
    """True when the lambda only uses its parameters, module-level names and builtins."""
    own = {arg.arg for arg in ast.walk(function.args) if isinstance(arg, ast.arg)}
    own |= {
        n.id
        for n in ast.walk(function)
        if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)
    }
    module_names = model.scopes.bindings(model.tree)
    for node in ast.walk(function.body):
        if not isinstance(node, ast.Name) or node.id in own:
            continue
        scope: ast.AST = model.scopes.scope_of(function)
        while not isinstance(scope, ast.Module):
            if node.id in model.scopes.bindings(scope):
                return False  # a local of the enclosing function: hoisting would break it
            scope = model.scopes.scope_of(scope)
        if node.id not in module_names and node.id not in _BUILTINS:
            return False
    return True


def _unique_name(base: str, taken: set[str]) -> str:
    name, counter = base, 2
    while name in taken:
        name, counter = f"{base}_{counter}", counter + 1
    return name


def _hoist(
    model: ModuleModel, function: ast.Lambda, name: str, source: str, offsets: _Offsets
) -> list[_Edit]:
    lambda_start, body_start = offsets.start(function), offsets.start(function.body)
    parameters = source[lambda_start + len("lambda") : body_start].strip()
    parameters = parameters[:-1].strip() if parameters.endswith(":") else parameters
    body = source[body_start : offsets.end(function.body)]
    if "\n" in body:
        body = f"({body})"
    statement: ast.AST = function
    while not isinstance(model.scopes.parents.get(statement), ast.Module):
        statement = model.scopes.parents[statement]
    decorators = getattr(statement, "decorator_list", [])
    first_line = min([statement.lineno, *(d.lineno for d in decorators)])  # type: ignore[attr-defined]
    while first_line > 1 and offsets.lines[first_line - 2].lstrip().startswith("#"):
        first_line -= 1  # keep the statement's own comment attached to it
    blank_before = 0
    while (
        first_line - 2 - blank_before >= 0
        and not offsets.lines[first_line - 2 - blank_before].strip()
    ):
        blank_before += 1
    lead = "" if first_line == 1 else "\n" * max(0, 2 - blank_before)
    text = f"{lead}def {name}({parameters}):\n    return {body}\n\n\n"
    insert_at = offsets.starts[first_line - 1]
    return [_Edit(insert_at, insert_at, text), _Edit(lambda_start, offsets.end(function), name)]


def _apply(source: str, edits: list[_Edit]) -> str:
    for edit in sorted(edits, key=lambda e: (e.start, e.end), reverse=True):
        source = source[: edit.start] + edit.text + source[edit.end :]
    return source


_GUARD = 'if __name__ == "__main__":'


def wrap_in_main(source: str) -> tuple[str, str | None]:
    """The script with its import-time code moved into ``main()`` + the guard, or the source
    unchanged and why it cannot be (one sentence)."""
    tree = ast.parse(source)
    stays: list[ast.stmt] = []
    moves: list[ast.stmt] = []
    for index, statement in enumerate(tree.body):
        docstring = index == 0 and isinstance(statement, ast.Expr)
        docstring = docstring and isinstance(getattr(statement, "value", None), ast.Constant)
        if docstring or isinstance(statement, _STAYS):
            stays.append(statement)
        elif isinstance(statement, ast.If) and _is_main_guard(statement.test):
            return source, (
                'it already has an `if __name__ == "__main__":` block; move the top-level '
                "code into it"
            )
        else:
            moves.append(statement)
    reason = _why_not_wrapped(stays, moves)
    if reason is not None:
        return source, reason
    name = _unique_name(
        "main",
        {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        | {getattr(s, "name", "") for s in stays},
    )
    lines = source.splitlines(keepends=True)
    body: list[str] = []
    keep = [True] * len(lines)
    for statement in moves:
        for number in range(statement.lineno, (statement.end_lineno or statement.lineno) + 1):
            keep[number - 1] = False
            text = lines[number - 1]
            body.append(f"    {text}" if text.strip() else text)
    if body and not body[-1].endswith("\n"):
        body[-1] += "\n"
    rest = _close_gaps(lines, keep).rstrip("\n")
    new = f"{rest}\n\n\ndef {name}():\n{''.join(body)}\n\n{_GUARD}\n    {name}()\n"
    return new.lstrip("\n"), None


_STAYS = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _why_not_wrapped(stays: list[ast.stmt], moves: list[ast.stmt]) -> str | None:
    """Why moving ``moves`` into a function would change what the script does, if it would."""
    if not moves:
        return "no top-level code to move"
    moved_names = {
        node.id
        for statement in moves
        for node in ast.walk(statement)
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load)
    }
    for statement in stays:
        local = _locals(statement)
        for node in ast.walk(statement):
            if (
                isinstance(node, ast.Name)
                and isinstance(node.ctx, ast.Load)
                and node.id in moved_names
                and node.id not in local
            ):
                where = getattr(statement, "name", "an import")
                return (
                    f"`{where}` (line {statement.lineno}) reads `{node.id}`, which the top-level "
                    "code sets: it would become a local of main(); pass it as an argument first"
                )
    for statement in moves:
        for node in ast.walk(statement):
            if isinstance(node, (ast.Global, ast.Nonlocal)):
                return f"line {node.lineno} declares `global`: a reader must decide"
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if node.end_lineno != node.lineno:
                    return (
                        f"the string at line {node.lineno} spans lines: indenting it would "
                        "change its text"
                    )
    taken = {statement.lineno for statement in moves}
    if len(taken) != len(moves) or any(s.lineno in taken for s in stays):
        return "two statements share a line"
    return None


def _close_gaps(lines: list[str], keep: list[bool]) -> str:
    """The kept lines; where code was taken out, the blank lines around it shrink to two."""
    out: list[str | None] = []
    for line, kept in zip(lines, keep):
        if kept:
            out.append(line)
        elif not out or out[-1] is not None:
            out.append(None)  # a gap
    text: list[str] = []
    run: list[str | None] = []
    for item in [*out, "<end>"]:
        if item is None or (item != "<end>" and not item.strip()):
            run.append(item)
            continue
        blanks = [line for line in run if line is not None]
        text.extend(blanks[:2] if None in run else blanks)
        run = []
        if item != "<end>":
            text.append(item)
    return "".join(text)


def _locals(statement: ast.stmt) -> set[str]:
    """Names a function binds itself (its parameters and assignments): not the module's."""
    if not isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return set()
    names = {arg.arg for arg in ast.walk(statement.args) if isinstance(arg, ast.arg)}
    declared = {
        n for node in ast.walk(statement) if isinstance(node, ast.Global) for n in node.names
    }
    for node in ast.walk(statement):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            names.add(node.id)
    return names - declared


def _is_main_guard(test: ast.expr) -> bool:
    if not (isinstance(test, ast.Compare) and len(test.comparators) == 1):
        return False
    left, right = test.left, test.comparators[0]
    if isinstance(right, ast.Name):
        left, right = right, left
    return (
        isinstance(left, ast.Name)
        and left.id == "__name__"
        and isinstance(right, ast.Constant)
        and right.value == "__main__"
    )


def fix_paths(
    paths: Sequence[str | Path],
    select: Sequence[str] | None = None,
    ignore: Sequence[str] | None = None,
    platform: str = "all",
    min_severity: str = "warning",
) -> LintReport:
    """Lint, rewrite the fixable findings in place, and lint again: what is left is reported."""
    before = check_paths(paths, select=select, ignore=ignore, platform=platform)
    by_path: dict[str, list[LintFinding]] = defaultdict(list)
    for finding in before.findings:
        if finding.code in ("LD102", "LD105") and finding.cell is None:
            by_path[finding.path].append(finding)
    fixed: list[FixRecord] = []
    unfixed: list[FixRecord] = []
    guard_findings = {
        finding.path: finding
        for finding in reversed(before.findings)
        if finding.code == "LD101" and finding.cell is None
    }
    for name, finding in guard_findings.items():
        path = Path(name)
        source, _ = read_source(path)
        new_text, reason = wrap_in_main(source.text)
        if reason is not None:
            unfixed.append(FixRecord(name, finding.line, "LD101", reason))
            continue
        with path.open("w", encoding="utf-8", newline="") as handle:
            handle.write(new_text)
        fixed.append(
            FixRecord(
                name,
                finding.line,
                "LD101",
                'moved the top-level code into main(), called under `if __name__ == "__main__":`',
            )
        )
        by_path.pop(name, None)  # positions moved: the LD102/LD105 fixes wait for the next run
    for name, findings in by_path.items():
        path = Path(name)
        if path.suffix == ".ipynb":
            continue
        source, _ = read_source(path)
        new_text, records = fix_source(source.text, findings, name)
        if records and new_text != source.text:
            with path.open("w", encoding="utf-8", newline="") as handle:
                handle.write(new_text)
            fixed.extend(records)
    after = check_paths(
        paths, select=select, ignore=ignore, platform=platform, min_severity=min_severity
    )
    after.fixed = sorted(fixed)
    after.unfixed = sorted(unfixed)
    return after
