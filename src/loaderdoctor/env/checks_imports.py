"""``env``'s check of imports: loaderdoctor's own dependencies and the target dataset's.

A missing module fails where it is first imported: an import inside ``__getitem__`` kills each
worker at its first sample, and loaderdoctor without one of its own dependencies gives verdicts
about the user's job that are really about its own machinery. Both are a failed check here.

Nothing is imported to find out: ``importlib.util.find_spec`` locates a module (and runs every
import hook, so a blocked module is found blocked) without executing it, so ``env`` stays fast
and torch-free without a target.
"""

from __future__ import annotations

import ast
import importlib.machinery
import importlib.util
import os
import re
import sys

from loaderdoctor.env.facts import Inputs, TargetImports
from loaderdoctor.env.findings import EnvCheck, Status, make_check

DISTRIBUTION = "loaderdoctor"
_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
_IMPORT_ERRORS = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}


def own_requirements() -> list[str] | None:
    """``[project.dependencies]`` of the installed loaderdoctor (no extras); None if not installed."""
    import importlib.metadata

    try:
        requires = importlib.metadata.requires(DISTRIBUTION) or []
    except importlib.metadata.PackageNotFoundError:
        return None
    names = []
    for requirement in requires:
        _, _, marker = requirement.partition(";")
        if "extra" in marker:  # an optional extra ([dev]): not needed at run time
            continue
        match = _NAME.match(requirement)
        if match:
            names.append(match.group(1))
    return names


def module_names(distribution: str) -> list[str] | None:
    """The top-level module(s) a distribution installs (``pillow`` -> ``PIL``); None when it is
    not installed. Its own ``top_level.txt`` when it has one (one small file, not every
    distribution's file list: that costs a second), else its name as a module name."""
    import importlib.metadata

    try:
        found = importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None
    normalized = distribution.lower().replace("-", "_")
    listed = (found.read_text("top_level.txt") or "").split()
    if not listed or normalized in listed:
        return [normalized]  # torch lists torchgen and functorch too: torch is the one needed
    return sorted(listed)


def why_not_importable(module: str, search_path: list[str] | None = None) -> str | None:
    """Why ``import module`` would fail, or None when it would be found (not executed)."""
    if module in sys.modules:
        return "blocked (sys.modules holds None for it)" if sys.modules[module] is None else None
    if search_path and importlib.machinery.PathFinder.find_spec(module, search_path):
        return None  # a module beside the target's file, as ``python file.py`` would find it
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError) as error:
        return f"{type(error).__name__}: {error}"
    return None if spec is not None else "not installed"


def check_own_dependencies() -> tuple[dict[str, str], str | None]:
    """Missing modules of loaderdoctor's dependencies (module -> why), and a note if unknown."""
    requirements = own_requirements()
    if requirements is None:
        return (
            {},
            f"{DISTRIBUTION} is not installed as a distribution: its dependencies are unknown",
        )
    missing: dict[str, str] = {}
    for distribution in requirements:
        modules = module_names(distribution)
        if modules is None:
            missing[distribution] = "not installed"
            continue
        for module in modules:
            reason = why_not_importable(module)
            if reason is not None:
                missing[module] = f"{reason} (from {distribution})"
    return missing, None


def _optional(handlers: list[ast.ExceptHandler]) -> bool:
    """Whether a ``try`` guards its imports: it catches ImportError (or wider, or everything)."""
    for handler in handlers:
        caught = handler.type
        names = [] if caught is None else caught.elts if isinstance(caught, ast.Tuple) else [caught]
        if caught is None or any(isinstance(n, ast.Name) and n.id in _IMPORT_ERRORS for n in names):
            return True
    return False


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def required_imports(tree: ast.AST) -> list[str]:
    """Top-level modules ``tree`` imports unconditionally (anywhere, functions included): not
    relative imports, not those under ``try: ... except ImportError`` or ``if TYPE_CHECKING``."""
    found: list[str] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.Try) and _optional(node.handlers):
            for child in [*node.handlers, *node.orelse, *node.finalbody]:
                visit(child)
            return
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.extend(alias.name.partition(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append(node.module.partition(".")[0])
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    skip = set(sys.stdlib_module_names) | {"__future__"}
    return sorted({name for name in found if name not in skip})


def target_source(spec: str) -> str | None:
    """The source file of ``path/to/file.py:NAME`` or ``package.module:NAME``, if there is one."""
    location = spec.rpartition(":")[0]
    if location.endswith(".py") or os.sep in location or "/" in location:
        return location if os.path.isfile(location) else None
    try:
        module_spec = importlib.util.find_spec(location)
    except (ImportError, ValueError):
        return None
    origin = module_spec.origin if module_spec is not None else None
    return origin if origin and origin.endswith(".py") and os.path.isfile(origin) else None


def scan_target(spec: str, load_error: str | None = None) -> TargetImports:
    """What the target's source imports, and which of those this environment cannot import."""
    source = target_source(spec)
    result = TargetImports(source, load_error=load_error)
    if source is None:
        return result
    try:
        with open(source, "rb") as handle:
            tree = ast.parse(handle.read(), filename=source)
    except (OSError, SyntaxError, ValueError):
        return result  # loading the spec says what is wrong with the file
    result.modules = required_imports(tree)
    beside = [os.path.dirname(os.path.abspath(source))]
    for module in result.modules:
        reason = why_not_importable(module, beside)
        if reason is not None:
            result.missing[module] = reason
    return result


def check_dependencies(inputs: Inputs) -> EnvCheck:
    own, note = check_own_dependencies()
    target = inputs.target_imports
    theirs = dict(target.missing) if target is not None else {}
    details: dict[str, object] = {
        "loaderdoctor_missing": own,
        "target_source": target.source if target else None,
        "target_imports": target.modules if target else None,
        "target_missing": theirs,
        "note": note,
    }
    parts = [f"loaderdoctor needs {name}: {why}" for name, why in own.items()]
    where = os.path.basename(target.source) if target and target.source else "the target"
    parts.extend(f"{where} imports {name}: {why}" for name, why in theirs.items())
    if target is not None and target.load_error and not theirs:
        parts.append(f"the target did not load: {target.load_error}")
    status: Status = "fail" if parts else "pass"
    counted = f" and the {len(target.modules)} modules {where} imports" if target else ""
    text = "; ".join(parts) or f"loaderdoctor's dependencies{counted} are all importable"
    if note and not parts:
        status, text = "unknown", note + (f"; {counted.strip()} are importable" if target else "")
    fix = None
    if own or theirs:
        names = " ".join(sorted({*own, *theirs}))
        fix = (
            f"Install what is missing in this environment (`pip install ...` for {names}; a "
            "module's package name can differ, PIL is pillow), and declare it in the project's "
            "dependencies so that every environment gets it."
        )
    return make_check("dependencies", status, len(own) + len(theirs), text, details, fix=fix)
