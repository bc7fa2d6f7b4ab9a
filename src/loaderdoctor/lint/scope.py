"""Reading a module the way a reader does: imports, name bindings and simple values.

Only stdlib ``ast``; nothing here imports torch, so linting stays fast and light.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef
ScopeNode = ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
_SCOPE_TYPES = (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
_MAX_DEPTH = 8


class _Marker:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


UNKNOWN = _Marker("UNKNOWN")
"""A value the linter cannot know statically."""
POSITIVE = _Marker("POSITIVE")
"""An integer known to be at least one, such as ``os.cpu_count()``."""

_CPU_COUNTS = frozenset(
    {"os.cpu_count", "multiprocessing.cpu_count", "psutil.cpu_count", "torch.get_num_threads"}
)
# Objects whose attributes a reader takes as argparse results (``args.num_workers``).
_ARG_HOLDER_NAMES = frozenset({"args", "opt", "opts", "arguments"})


def dotted_name(node: ast.AST) -> str | None:
    """``a.b.c`` for a Name/Attribute chain, else None."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def is_self_attribute(node: ast.AST, attr: str | None = None) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
        and (attr is None or node.attr == attr)
    )


def walk_local(node: ast.AST) -> Iterator[ast.AST]:
    """Every node under ``node`` without entering nested function, lambda or class bodies."""
    stack = list(ast.iter_child_nodes(node))
    while stack:
        child = stack.pop()
        yield child
        if isinstance(child, (*_SCOPE_TYPES, ast.ClassDef)):
            continue
        stack.extend(ast.iter_child_nodes(child))


def _walk(tree: ast.AST, parents: dict[ast.AST, ast.AST]) -> list[ast.AST]:
    """Every node in source order (pre-order), filling ``parents`` on the way, in one pass.

    ``ast.walk`` plus ``ast.iter_child_nodes`` visits every node twice, and the Load/Store
    context objects, which no rule needs: this is a third of the time of a lint run.
    """
    nodes: list[ast.AST] = []
    stack: list[ast.AST] = [tree]
    context = ast.expr_context
    node_type = ast.AST
    while stack:
        node = stack.pop()
        nodes.append(node)
        children: list[ast.AST] = []
        for name in node._fields:
            value = getattr(node, name, None)
            if isinstance(value, list):
                for item in value:
                    if isinstance(item, node_type) and not isinstance(item, context):
                        children.append(item)
            elif isinstance(value, node_type) and not isinstance(value, context):
                children.append(value)
        for child in children:
            parents[child] = node
        children.reverse()
        stack.extend(children)
    return nodes


class Scopes:
    """Parents, imports and the bindings of every function and of the module."""

    def __init__(self, tree: ast.Module) -> None:
        self.tree = tree
        self.parents: dict[ast.AST, ast.AST] = {}
        self.imports: dict[str, str] = {}
        # local name -> (module as written, imported name or None for a module, relative level)
        self.import_sources: dict[str, tuple[str, str | None, int]] = {}
        self.arg_holders: set[str] = set(_ARG_HOLDER_NAMES)
        self._bindings: dict[ast.AST, dict[str, list[ast.AST]]] = {}
        self.argparse_defaults: dict[str, ast.expr | None] = {}
        self.nodes: list[ast.AST] = _walk(tree, self.parents)
        self.attributes: dict[str, list[ast.Attribute]] = {}
        self.star_imports: list[tuple[str, int]] = []  # from <level dots><module> import *
        for node in self.nodes:
            if isinstance(node, ast.Attribute):
                self.attributes.setdefault(node.attr, []).append(node)
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        self.imports[alias.asname] = alias.name
                        self.import_sources[alias.asname] = (alias.name, None, 0)
                    else:
                        head = alias.name.split(".")[0]
                        self.imports[head] = head
                        self.import_sources[head] = (head, None, 0)
            elif isinstance(node, ast.ImportFrom):
                if any(alias.name == "*" for alias in node.names):
                    self.star_imports.append((node.module or "", node.level))
                    continue
                for alias in node.names:
                    local = alias.asname or alias.name
                    self.import_sources[local] = (node.module or "", alias.name, node.level)
                    if node.module and not node.level:
                        self.imports[local] = f"{node.module}.{alias.name}"
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                if node.func.attr == "add_argument":
                    self._record_argument(node)
            elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
                func = node.value.func
                if isinstance(func, ast.Attribute) and func.attr == "parse_args":
                    for target in node.targets:
                        if isinstance(target, ast.Name):
                            self.arg_holders.add(target.id)

    # -- names -------------------------------------------------------------------------------

    def qualified(self, node: ast.AST) -> str | None:
        """The dotted name with its first part replaced by what it was imported as."""
        dotted = dotted_name(node)
        if dotted is None:
            return None
        head, _, rest = dotted.partition(".")
        origin = self.imports.get(head)
        if origin is None:
            return dotted
        return f"{origin}.{rest}" if rest else origin

    def is_imported(self, name: str) -> bool:
        return name in self.imports or name in self.import_sources

    def scope_of(self, node: ast.AST) -> ScopeNode:
        current = self.parents.get(node)
        while current is not None and not isinstance(current, _SCOPE_TYPES):
            current = self.parents.get(current)
        return current if current is not None else self.tree

    def enclosing(self, node: ast.AST, kinds: tuple[type, ...]) -> ast.AST | None:
        current = self.parents.get(node)
        while current is not None:
            if isinstance(current, kinds):
                return current
            current = self.parents.get(current)
        return None

    def bindings(self, scope: ast.AST) -> dict[str, list[ast.AST]]:
        """Name -> binding nodes: the assigned value expression, a def/class, or the statement."""
        cached = self._bindings.get(scope)
        if cached is not None:
            return cached
        table: dict[str, list[ast.AST]] = {}
        if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            arguments = scope.args
            for arg in (
                *arguments.posonlyargs,
                *arguments.args,
                *arguments.kwonlyargs,
                *(a for a in (arguments.vararg, arguments.kwarg) if a is not None),
            ):
                table.setdefault(arg.arg, []).append(arguments)
        stack: list[ast.AST] = []
        if isinstance(scope, ast.Lambda):
            stack.append(scope.body)
        elif isinstance(scope, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef)):
            stack.extend(scope.body)
        while stack:
            node = stack.pop()
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                table.setdefault(node.name, []).append(node)
                stack.extend(node.decorator_list)
                continue
            if isinstance(node, (ast.Lambda, *_COMPREHENSIONS)):
                continue
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        table.setdefault(target.id, []).append(node.value)
                    elif pairs := _unpacked_pairs(target, node.value):
                        # a, b = x(), y(): each name holds its own element
                        for element, value in pairs:
                            if isinstance(element, ast.Name):
                                table.setdefault(element.id, []).append(value)
                            else:
                                self._bind_other(element, node, table)
                    else:
                        self._bind_other(target, node, table)
                stack.append(node.value)
                continue
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                if node.value is not None:
                    table.setdefault(node.target.id, []).append(node.value)
                    stack.append(node.value)
                continue
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias in node.names:
                    name = alias.asname or alias.name.split(".")[0]
                    table.setdefault(name, []).append(node)
                continue
            if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
                table.setdefault(node.id, []).append(self.parents.get(node, node))
                continue
            stack.extend(ast.iter_child_nodes(node))
        self._bindings[scope] = table
        return table

    @staticmethod
    def _bind_other(target: ast.AST, stmt: ast.AST, table: dict[str, list[ast.AST]]) -> None:
        for node in ast.walk(target):
            if isinstance(node, ast.Name):
                table.setdefault(node.id, []).append(stmt)

    def lookup(self, name: str, at: ast.AST) -> list[ast.AST]:
        """The bindings of ``name`` visible at ``at`` (innermost function first, then module)."""
        scope: ast.AST | None = self.scope_of(at)
        while scope is not None:
            found = self.bindings(scope).get(name)
            if found:
                return found
            if isinstance(scope, ast.Module):
                return []
            scope = self.scope_of(scope)
        return []

    def reaching(self, name: str, at: ast.AST) -> list[ast.AST]:
        """The bindings of ``name`` that may hold its value at ``at``: one bound in the other
        branch of an ``if`` that ``at`` is in cannot (``dataset = A()`` in the body and
        ``dataset = B()`` in the ``else``, each handed to its own DataLoader there)."""
        found = self.lookup(name, at)
        if len(found) < 2:
            return found
        branches = self._branches(at)
        kept = [
            binding
            for binding in found
            if not any(branches.get(id(node), side) != side for node, side in self._sides(binding))
        ]
        return kept or found

    def _sides(self, node: ast.AST) -> Iterator[tuple[ast.AST, str]]:
        """Each ``if`` above ``node``, with the branch (body or orelse) that holds it."""
        child, parent = node, self.parents.get(node)
        while parent is not None and not isinstance(parent, ast.Module):
            if isinstance(parent, ast.If):
                if any(child is statement for statement in parent.body):
                    yield parent, "body"
                elif any(child is statement for statement in parent.orelse):
                    yield parent, "orelse"
            child, parent = parent, self.parents.get(parent)

    def _branches(self, node: ast.AST) -> dict[int, str]:
        return {id(statement): side for statement, side in self._sides(node)}

    def single_binding(self, name: str, at: ast.AST) -> ast.AST | None:
        found = self.lookup(name, at)
        return found[0] if len(found) == 1 else None

    # -- values ------------------------------------------------------------------------------

    def _record_argument(self, call: ast.Call) -> None:
        flags = [
            a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)
        ]
        dest: str | None = None
        default: ast.expr | None = None
        for keyword in call.keywords:
            if keyword.arg == "dest" and isinstance(keyword.value, ast.Constant):
                dest = str(keyword.value.value)
            elif keyword.arg == "default":
                default = keyword.value
            elif keyword.arg == "action" and isinstance(keyword.value, ast.Constant):
                if keyword.value.value in ("store_true", "store_false") and default is None:
                    default = ast.Constant(value=keyword.value.value == "store_false")
        if dest is None:
            longs = [flag for flag in flags if flag.startswith("--")]
            chosen = longs[0] if longs else (flags[0] if flags else None)
            if chosen is None:
                return
            dest = chosen.lstrip("-").replace("-", "_")
        if dest in self.argparse_defaults:
            self.argparse_defaults[dest] = None  # declared twice: a reader cannot tell
        else:
            self.argparse_defaults[dest] = default

    def evaluate(self, node: ast.AST | None, depth: int = 0) -> object:
        """A constant, POSITIVE or UNKNOWN: what a careful reader can tell about ``node``."""
        if node is None or depth > _MAX_DEPTH:
            return UNKNOWN
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            binding = self.single_binding(node.id, node)
            if isinstance(binding, ast.expr):
                return self.evaluate(binding, depth + 1)
            return UNKNOWN
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.value.id in self.arg_holders and node.attr in self.argparse_defaults:
                return self.evaluate(self.argparse_defaults[node.attr], depth + 1)
            return UNKNOWN
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            value = self.evaluate(node.operand, depth + 1)
            return -value if type(value) is int else UNKNOWN
        if isinstance(node, ast.IfExp):
            body = self.evaluate(node.body, depth + 1)
            orelse = self.evaluate(node.orelse, depth + 1)
            if body == orelse:
                return body
            if _is_positive(body) and _is_positive(orelse):
                return POSITIVE
            return UNKNOWN
        if isinstance(node, ast.BinOp):
            return self._binop(node, depth)
        if isinstance(node, ast.Call):
            return self._call(node, depth)
        return UNKNOWN

    def _binop(self, node: ast.BinOp, depth: int) -> object:
        left = self.evaluate(node.left, depth + 1)
        right = self.evaluate(node.right, depth + 1)
        if type(left) is int and type(right) is int:
            if isinstance(node.op, ast.Add):
                return left + right
            if isinstance(node.op, ast.Sub):
                return left - right
            if isinstance(node.op, ast.Mult):
                return left * right
            if isinstance(node.op, ast.FloorDiv) and right:
                return left // right
            return UNKNOWN
        if isinstance(node.op, (ast.Add, ast.Mult)) and _is_positive(left) and _is_positive(right):
            return POSITIVE
        return UNKNOWN

    def _call(self, node: ast.Call, depth: int) -> object:
        name = self.qualified(node.func)
        if name in _CPU_COUNTS:
            return POSITIVE
        if name == "len" and len(node.args) == 1 and isinstance(node.args[0], ast.Call):
            if self.qualified(node.args[0].func) == "os.sched_getaffinity":
                return POSITIVE
        if name == "int" and len(node.args) == 1:
            value = self.evaluate(node.args[0], depth + 1)
            if type(value) is int or value is POSITIVE:
                return value
            if isinstance(value, str) and value.strip().lstrip("-").isdigit():
                return int(value)
            return UNKNOWN
        if name in ("min", "max") and node.args and not node.keywords:
            values = [self.evaluate(arg, depth + 1) for arg in node.args]
            if all(type(value) is int for value in values):
                return min(values) if name == "min" else max(values)  # type: ignore[type-var]
            if name == "min" and all(_is_positive(value) for value in values):
                return POSITIVE
            if name == "max" and any(_is_positive(value) for value in values):
                return POSITIVE
        return UNKNOWN


def _unpacked_pairs(target: ast.AST, value: ast.AST) -> list[tuple[ast.expr, ast.expr]]:
    """(name, value) pairs of ``a, b = x, y``; empty when the shapes differ or star."""
    if not (isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, (ast.Tuple, ast.List))):
        return []
    if len(target.elts) != len(value.elts):
        return []
    if any(isinstance(e, ast.Starred) for e in (*target.elts, *value.elts)):
        return []
    return list(zip(target.elts, value.elts))


def _is_positive(value: object) -> bool:
    return value is POSITIVE or (type(value) is int and value > 0)


def is_positive(value: object) -> bool:
    """True for an int known to be at least one."""
    return _is_positive(value)
