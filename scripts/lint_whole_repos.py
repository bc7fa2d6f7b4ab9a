"""Score ``loaderdoctor lint`` on whole public repositories whose pitfalls were written down by hand.

Run: ``python scripts/lint_whole_repos.py SNAPSHOTS [--json]``. SNAPSHOTS is a folder holding one
git directory per repository, at ``SNAPSHOTS/<owner>+<name>/repo`` (bare or not); the files each
repository entry of ``lint_whole/expectations.toml`` names are taken unmodified from the commit it
names (``git show``) into a temporary folder, and each repository is linted as one project.

A finding *hits* a ``want`` row when code, file and line match; it is *near* when code and file
match and the line is within ``NEAR_LINES`` (the finding names the pitfall at another line of the
same chain, such as the attribute assignment instead of the call that opened the handle), or
when it is reported where the chain starts and its message cites the wanted file (LD108 is
reported at the Dataset's call and names the OpenCV call it reaches): then every finding that
cites it is that pitfall, once per Dataset. Every other finding at the default severity is a
false alarm, a ``deny`` row hit among them.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from loaderdoctor.lint import check_paths

EXPECTATIONS = Path(__file__).parent / "lint_whole" / "expectations.toml"
NEAR_LINES = 10

Key = tuple[str, int, str]  # (path in the repository, line, code)


@dataclass
class RepoScore:
    name: str
    want: list[Key]
    hits: list[Key] = field(default_factory=list)
    near: list[Key] = field(default_factory=list)
    misses: list[Key] = field(default_factory=list)
    false_alarms: list[Key] = field(default_factory=list)
    denied: list[Key] = field(default_factory=list)


def _key(row: str) -> Key:
    code, where = row.split()[:2]
    path, line = where.rsplit(":", 1)
    return (path, int(line), code)


def lay_out(entry: dict[str, object], snapshots: Path, into: Path) -> Path:
    owner, name = str(entry["repository"]).split("/")
    git_dir = snapshots / f"{owner}+{name}" / "repo"
    folder = into / str(entry["name"])
    for relative in entry["files"]:  # type: ignore[attr-defined]
        target = folder / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        text = subprocess.run(
            ["git", "-C", str(git_dir), "show", f"{entry['commit']}:{relative}"],
            check=True,
            capture_output=True,
        ).stdout
        target.write_bytes(text)
    return folder


def score_repo(entry: dict[str, object], folder: Path) -> RepoScore:
    want = [_key(row) for row in entry.get("want", [])]  # type: ignore[attr-defined]
    deny = {_key(row) for row in entry.get("deny", [])}  # type: ignore[attr-defined]
    report = check_paths([folder])
    found = {(Path(f.path).relative_to(folder).as_posix(), f.line, f.code) for f in report.findings}
    cites = {
        (Path(f.path).relative_to(folder).as_posix(), f.line, f.code): f.message
        for f in report.findings
    }
    result = RepoScore(str(entry["name"]), want)
    used: set[Key] = set()
    for key in want:
        if key in found:
            result.hits.append(key)
            used.add(key)
    for key in want:
        if key in result.hits:
            continue
        close = [
            f
            for f in found - used
            if f[0] == key[0] and f[2] == key[2] and abs(f[1] - key[1]) <= NEAR_LINES
        ]
        citing = [f for f in found if f[2] == key[2] and f"/{key[0]}:" in cites[f]]
        if close:
            result.near.append(key)
            used.add(min(close, key=lambda f: abs(f[1] - key[1])))
        elif citing:
            result.near.append(key)
            used.update(citing)
        else:
            result.misses.append(key)
    result.false_alarms = sorted(found - used)
    result.denied = sorted(found & deny)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("snapshots", type=Path)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    entries = tomllib.loads(EXPECTATIONS.read_text())["repo"]
    with tempfile.TemporaryDirectory(prefix="lint-whole-") as temporary:
        scores = [score_repo(e, lay_out(e, args.snapshots, Path(temporary))) for e in entries]
    held_out = {str(e["name"]) for e in entries if e.get("held_out")}
    summary = {
        "scored before tuning": _summary([s for s in scores if s.name not in held_out]),
        "held out": _summary([s for s in scores if s.name in held_out]),
    }
    if args.json:
        print(json.dumps({"summary": summary, "repos": [s.__dict__ for s in scores]}, indent=1))
        return 0
    for s in scores:
        print(f"{s.name}: {len(s.hits)} hit, {len(s.near)} near, of {len(s.want)}")
        for label, keys in (("miss", s.misses), ("near", s.near), ("false", s.false_alarms)):
            for path, line, code in keys:
                print(f"  {label} {code} {path}:{line}")
        for path, line, code in s.denied:
            print(f"  DENIED {code} {path}:{line}")
    for group, figures in summary.items():
        print(f"{group}: {json.dumps(figures)}")
    return 0


def _summary(scores: list[RepoScore]) -> dict[str, float]:
    wanted = sum(len(s.want) for s in scores)
    hits = sum(len(s.hits) for s in scores)
    near = sum(len(s.near) for s in scores)
    false_alarms = sum(len(s.false_alarms) for s in scores)
    return {
        "repos": len(scores),
        "want": wanted,
        "hits": hits,
        "near": near,
        "false_alarms": false_alarms,
        "recall": round(hits / max(1, wanted), 3),
        "recall_with_near": round((hits + near) / max(1, wanted), 3),
        "precision": round((hits + near) / max(1, hits + near + false_alarms), 3),
    }


if __name__ == "__main__":
    sys.exit(main())
