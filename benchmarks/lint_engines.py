"""Would an inference engine (astroid, pylint's) answer lint's value-flow questions better?

Run: ``pip install astroid`` then ``python benchmarks/lint_engines.py [PATH]``. astroid is not a
dependency of loaderdoctor; this script is how the choice to extend lint's own flow instead was
measured, and how to measure it again.

1. Questions: for each hop that hid a pitfall from lint in whole repositories, ask astroid what
   the expression can be in the realistic projects of ``tests/lint_corpus/projects`` and print
   what it infers next to what lint needs to know.
2. Speed (with PATH, a folder of training code): in fresh processes, lines per second of
   astroid building every module and of astroid also inferring the callee of every call, beside
   ``loaderdoctor lint`` on the same folder, start-up included.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

PROJECTS = Path(__file__).resolve().parent.parent / "tests" / "lint_corpus" / "projects"

# (project, module path, function or "", expression text, what lint needs); the expression's
# first read there, or its second for `dataset` (the DataLoader with workers).
QUESTIONS = [
    ("handed_values", "train.py", "main", "scale_to_unit", "a lambda, via `from augment import *`"),
    ("handed_values", "datasets.py", "Frames.__getitem__", "self.transform", "RandomPolicy/Resize"),
    ("handed_values", "augment/policy.py", "RandomPolicy.__call__", "OPERATIONS[name]", "rotate"),
    ("handed_values", "datasets.py", "Pipeline.__getitem__", "step", "Resize (via getattr)"),
    ("handed_values", "train.py", "main", "count", "defaultdict holding a lambda"),
    ("branch_bindings", "train.py", "main", "dataset", "LazyVolumes at the 8-worker loader"),
    ("loader_calls", "run_module_attribute.py", "", "pipe.fit", "pipeline.steps.fit"),
    ("loader_calls", "pipeline/framework.py", "Trainer.train", "self.train_loader", "a DataLoader"),
]

_SPEED = """
import sys, time
start, cpu = time.perf_counter(), time.process_time()
import astroid
from astroid import nodes
from pathlib import Path
mode = sys.argv[2]
lines = 0
modules = []
for path in sorted(p for p in Path(sys.argv[1]).rglob("*.py") if p.is_file()):
    text = path.read_text(errors="replace")
    lines += text.count("\\n") + 1
    try:
        modules.append(astroid.parse(text, module_name=path.stem, path=str(path)))
    except Exception:
        pass
if mode == "infer":
    for module in modules:
        for call in module.nodes_of_class(nodes.Call):
            try:
                list(call.func.infer())
            except Exception:
                pass
print(lines, time.perf_counter() - start, time.process_time() - cpu)
"""

_LINT = """
import sys, time
start, cpu = time.perf_counter(), time.process_time()
from loaderdoctor.lint import check_paths
report = check_paths([sys.argv[1]])
print(report.lines_checked, time.perf_counter() - start, time.process_time() - cpu)
"""


def ask(project: str, module_path: str, where: str, expression: str) -> list[str]:
    import astroid  # type: ignore[import-not-found]
    from astroid import nodes

    root = PROJECTS / project
    astroid.MANAGER.clear_cache()  # two projects both have a datasets.py
    sys.path.insert(0, str(root))
    try:
        name = module_path.removesuffix(".py").replace("/", ".").removesuffix(".__init__")
        module = astroid.MANAGER.ast_from_file(str(root / module_path), modname=name)
        scope: nodes.NodeNG = module
        for part in where.split(".") if where else []:
            scope = scope[part]  # type: ignore[index]
        reads = [
            node
            for node in scope.nodes_of_class((nodes.Name, nodes.Attribute, nodes.Subscript))
            if node.as_string() == expression
            and not isinstance(node, (nodes.AssignName, nodes.AssignAttr))
        ]
        if not reads:
            return ["(expression not found)"]
        target = reads[1] if expression == "dataset" and len(reads) > 1 else reads[0]
        found = []
        for value in target.infer():
            text = getattr(value, "name", None) or type(value).__name__
            found.append(f"{type(value).__name__}:{text}")
        return found
    finally:
        sys.path.remove(str(root))


def speed(path: str) -> dict[str, float]:
    figures = {}
    for label, code, argument in (
        ("astroid build", _SPEED, "build"),
        ("astroid build + infer every callee", _SPEED, "infer"),
        ("loaderdoctor lint", _LINT, ""),
    ):
        done = subprocess.run(
            [sys.executable, "-c", code, path, argument],
            capture_output=True,
            text=True,
            check=True,
            timeout=1800,
        )
        lines, wall, cpu = (float(v) for v in done.stdout.split()[-3:])
        figures[label] = round(lines / cpu)
        print(
            f"{label:36s} {int(lines):,} lines {wall:7.2f} s wall {cpu:7.2f} s CPU "
            f"{lines / cpu:10,.0f} lines/s (CPU)"
        )
    return figures


def main() -> int:
    for project, module_path, where, expression, needed in QUESTIONS:
        try:
            answer = ask(project, module_path, where, expression)
        except Exception as error:  # astroid raises its own inference errors
            answer = [f"{type(error).__name__}"]
        print(f"{project}/{module_path} {expression!r}: astroid {answer}; lint needs {needed}")
    if len(sys.argv) > 1:
        print(json.dumps(speed(sys.argv[1])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
