"""The chaos harness: seeded plans of a loader's whole life with faults at every phase, and the
invariants each plan's run must keep.

A plan is data (``generate(seed)``): the loader's shape (map-style or a stream, torch's
``DataLoader`` or torchdata's ``StatefulDataLoader``, workers, prefetch, persistence, sampling,
start method), its life (epochs, an early ``break``, a ``state_dict()`` taken mid-epoch and
loaded into a new loader, re-iteration, ``del``) and its faults: samples that raise, segfault,
kill their worker or stall past ``hang_timeout``, once or always; a ``collate_fn`` that crashes on
one sample's batch; a ``worker_init_fn`` that is slow or crashes once; external SIGKILLs at chosen
moments (while the workers start, idle between epochs, right after ``iter()``, mid-epoch) and at
random ones (a killer thread). ``fixtures/chaos_child.py`` runs a plan in a process of its own and
writes what it saw; ``check`` holds it to the promise:

* each healthy sample is delivered exactly once per complete epoch (a ledger), or the loss is said
  (status ``healed-with-loss``, an incident with action ``lost`` that names the worker's stream,
  and a warning);
* an early ``break`` or a resumed ``state_dict`` never doubles a sample;
* healing never raises where it could go on (the only raise allowed is a ``HealingStoppedError``
  at ``max_deaths_in_a_row`` that the plan itself earned: the harness killed workers, or planted
  deaths that strike once, as many times as the error counts, with no batch between);
* the run ends within its time (never a hang), and leaves no worker behind;
* the report's counts equal the ledger's.

A failing plan says its seed and the command that replays it:
``python tests/chaos.py SEED`` (the same plan; the moments of the random killer thread are
timing, not plan, so a replay can differ there).
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psutil

HERE = Path(__file__).parent
CHILD = HERE / "fixtures" / "chaos_child.py"

SAMPLE_FAULTS = (
    "raise-once",
    "raise-always",
    "segv-once",
    "segv-always",
    "kill-once",
    "kill-always",
    "stall-once",
    "stall-always",
)
# The faults after which the sample is not delivered (the sample's own fault: skipped, or
# quarantined after it failed again alone). A stream cannot be read past such an item.
ALWAYS = frozenset(f for f in SAMPLE_FAULTS if f.endswith("-always"))
KILL_MOMENTS = ("starting", "after-iter", "between-epochs", "mid-epoch")
HANG_TIMEOUT_S = 4.0
STOPPED_AT_LIMIT = re.compile(
    r"HealingStoppedError: (?:loaderdoctor )?healing stopped: (\d+) worker deaths in a row .*"
    r"max_deaths_in_a_row="
)
# A plan's run must end within this (a hang past it fails the plan: never a hang).
PLAN_TIMEOUT_S = 150.0


def generate(seed: int, *, stateful_available: bool = True, quick: bool = False) -> dict[str, Any]:
    """The plan of ``seed``: a loader's shape, its life and its faults (JSON-ready). ``quick``
    (CI's bounded form): a spawned pool has at most 2 workers (each imports torch anew, and a
    rebuilt pool of 4 on 2 busy cores took 115 s of healing)."""
    rng = random.Random(seed)
    kind = rng.choice(["map", "map", "iterable"])
    loader = "stateful" if stateful_available and rng.random() < 0.3 else "torch"
    workers = rng.choice([1, 2, 4])
    start = "spawn" if rng.random() < 0.15 else "fork"
    if quick and start == "spawn":
        workers = min(workers, 2)
    n = rng.choice([32, 48, 64])
    batch_size = rng.choice([2, 4])
    plan: dict[str, Any] = {
        "seed": seed,
        "loader": loader,
        "kind": kind,
        "n": n,
        "batch_size": batch_size,
        "workers": workers,
        "prefetch": rng.choice([1, 2]),
        "persistent": rng.random() < 0.5,
        "sampling": (
            rng.choice(["sequential", "shuffle", "sampler", "batch_sampler"])
            if kind == "map"
            else "stream"
        ),
        "start": start,
        "hang_timeout": HANG_TIMEOUT_S,
        "faults": {},
        "collate_fault": None,
        "init_fault": None,
        "random_kills": None,
        "epochs": [],
    }
    # Faults in samples: a few indices, each with one way to fail
    faults: dict[str, str] = {}
    for _ in range(rng.choice([0, 1, 1, 2, 3])):
        mode = rng.choice(SAMPLE_FAULTS)
        if start == "spawn" and mode.startswith("stall"):
            mode = "raise-once"  # a probe of a stall costs a spawned pool's start-up: kept short
        faults[str(rng.randrange(n))] = mode
    plan["faults"] = faults
    healthy = [i for i in range(n) if faults.get(str(i)) not in ALWAYS]
    if rng.random() < 0.25 and healthy:
        modes = ["segv-once", "kill-once"]
        if kind == "map":  # a stream's batch cannot be re-collated without its bad item
            modes += ["segv-always", "kill-always"]
        plan["collate_fault"] = {"index": rng.choice(healthy), "mode": rng.choice(modes)}
    # a dataset that loads a whole batch at once (Hugging Face datasets.Dataset's __getitems__)
    plan["getitems"] = kind == "map" and rng.random() < 0.25
    if rng.random() < 0.2:
        plan["init_fault"] = rng.choice(["slow", "segv-once"])
    if rng.random() < 0.2:
        plan["random_kills"] = round(rng.uniform(1.5, 3.0), 2)
    epochs = rng.choice([2, 2, 3])
    batches = -(-n // batch_size)
    for epoch in range(epochs):
        life: dict[str, Any] = {"kills": [], "break_after": None, "state_dict_at": None}
        if epoch < epochs - 1 and rng.random() < 0.2:
            life["break_after"] = rng.randrange(1, max(2, batches // 2))
        elif (
            loader == "stateful"
            and kind == "map"
            # A new loader resumes a sampler's own random state only for torchdata's own
            # RandomSampler (shuffle): another sampler's generator starts over in the new
            # loader, as under stock torchdata, unless no epoch has drawn from it yet.
            and (plan["sampling"] in ("sequential", "shuffle") or epoch == 0)
            and rng.random() < 0.4
        ):
            life["state_dict_at"] = rng.randrange(1, max(2, batches // 2))
        for _ in range(rng.choice([0, 1, 1, 2])):
            moment = rng.choice(KILL_MOMENTS)
            if moment == "between-epochs" and (epoch == 0 or not plan["persistent"]):
                moment = "after-iter"
            kill: dict[str, Any] = {"moment": moment, "worker": rng.randrange(workers)}
            if moment == "mid-epoch":
                kill["at"] = rng.randrange(0, max(1, batches - 1))
            life["kills"].append(kill)
        plan["epochs"].append(life)
    if plan["init_fault"] == "slow":
        # a worker killed while it runs worker_init_fn: while starting, for certain
        plan["epochs"][0]["kills"].append({"moment": "starting", "worker": 0})
    return plan


def healthy_items(plan: dict[str, Any]) -> set[int]:
    """The samples every complete epoch must deliver exactly once (for a stream: unless its loss
    is said)."""
    faults = plan["faults"]
    items = set(range(plan["n"]))
    if plan["sampling"] in ("sampler", "batch_sampler"):
        items = {i for i in items if i % 4 != 3}  # the child's subset: three of every four
    collate = plan["collate_fault"]
    if collate is not None and collate["mode"] in ALWAYS:
        items.discard(collate["index"])  # it kills the collate of any batch it is in
    return {i for i in items if faults.get(str(i)) not in ALWAYS}


def stream_position(plan: dict[str, Any], item: int) -> tuple[int, int]:
    """(worker, position in its stream) of a stream's item: worker w yields w, w+W, w+2W, ..."""
    workers = plan["workers"]
    return item % workers, item // workers


def check(plan: dict[str, Any], result: dict[str, Any]) -> list[str]:
    """What the run broke of the promise; empty when it kept it."""
    problems: list[str] = []
    if result.get("error") and not earned_stop(plan, result):
        problems.append(f"raised: {result['error']}")
    healthy = healthy_items(plan)
    lost_from = _lost_streams(plan, result)
    total_samples = 0
    total_batches = 0
    for number, epoch in enumerate(result.get("epochs", [])):
        delivered: list[int] = epoch["items"]
        total_samples += len(delivered)
        total_batches += epoch["batches"]
        doubled = sorted(i for i, count in Counter(delivered).items() if count > 1)
        if doubled:
            problems.append(f"epoch {number}: delivered more than once: {doubled[:10]}")
        unhealthy = sorted(set(delivered) - healthy)
        if unhealthy:
            problems.append(f"epoch {number}: delivered a bad sample: {unhealthy[:10]}")
        if not epoch["complete"]:
            continue
        missing = sorted(healthy - set(delivered))
        if plan["kind"] == "iterable":
            # A generator cannot be re-tried at an item that raised: the item is skipped (said
            # as such); one that kills its worker twice ends that worker's stream (said lost).
            skipped = set(_stream_incidents(result, "skipped"))
            unsaid = [
                i
                for i in missing
                if stream_position(plan, i) not in skipped
                and not any(
                    stream_position(plan, i)[0] == w and stream_position(plan, i)[1] >= p
                    for w, p in lost_from
                )
            ]
        else:
            unsaid = missing
        if unsaid:
            problems.append(
                f"epoch {number}: {len(unsaid)} healthy samples lost without a word: {unsaid[:10]}"
            )
    status = result.get("status")
    if result.get("error"):
        return problems  # the raise says it all; the status is "crashed" then
    if lost_from and status != "healed-with-loss":
        problems.append(f"a stream's loss was recorded, but the status is {status!r}")
    if status == "healed-with-loss" and not lost_from:
        problems.append("status healed-with-loss, but no incident says what was lost")
    if lost_from and not any("lost" in w for w in result.get("warnings", [])):
        problems.append("a loss was recorded but no warning said it")
    counts = result.get("counts")
    if counts is not None and not result.get("error"):
        if counts["samples"] != total_samples or counts["batches"] != total_batches:
            problems.append(
                f"report counts {counts['batches']} batches / {counts['samples']} samples, the "
                f"ledger {total_batches} / {total_samples}"
            )
    if result.get("leftover_workers"):
        problems.append(
            f"workers left running after the loader's end: {result['leftover_workers']}"
        )
    return problems


def earned_stop(plan: dict[str, Any], result: dict[str, Any]) -> bool:
    """Healing stopped at ``max_deaths_in_a_row``, and the plan accounts for every death the error
    counts: the workers the harness killed since the loop's last batch, plus at most one death
    for each fault planted to strike once (a sample, the collate_fn, the worker_init_fn). A
    random killer faster than a worker's start earns it; a stop the plan cannot account for is
    a broken promise."""
    found = STOPPED_AT_LIMIT.match(result.get("error") or "")
    if found is None:
        return False
    planted = [*plan["faults"].values(), (plan["collate_fault"] or {}).get("mode")]
    once = sum(1 for mode in planted if mode and mode.endswith("-once") and mode != "raise-once")
    once += plan["init_fault"] == "segv-once"
    return result.get("kills_since_batch", 0) + once >= int(found[1])


def _lost_streams(plan: dict[str, Any], result: dict[str, Any]) -> list[tuple[int, int]]:
    """(worker, position) of each stream loss the report says."""
    return _stream_incidents(result, "lost")


def _stream_incidents(result: dict[str, Any], action: str) -> list[tuple[int, int]]:
    found = []
    for incident in result.get("incidents", []):
        position = incident.get("position")
        if incident.get("action") == action and position is not None:
            found.append((int(incident["worker_id"]), int(position)))
    return found


def replay_command(seed: int) -> str:
    return f"python tests/chaos.py {seed}"


def run_plan(plan: dict[str, Any], timeout: float = PLAN_TIMEOUT_S) -> tuple[dict[str, Any], str]:
    """Run ``plan`` in a process of its own: (what it saw, its stderr). A run past ``timeout`` is
    killed with everything it started and comes back as a hang."""
    with tempfile.TemporaryDirectory(prefix="loaderdoctor-chaos-") as folder:
        plan_path = Path(folder) / "plan.json"
        out_path = Path(folder) / "result.json"
        plan_path.write_text(json.dumps(plan))
        process = subprocess.Popen(
            [sys.executable, str(CHILD), str(plan_path), str(out_path), folder],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
            cwd=folder,
        )
        try:
            _, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_tree(process.pid)
            _, stderr = process.communicate(timeout=30)
            return {"error": f"hang: the plan's run did not end within {timeout:.0f} s"}, stderr
        finally:
            _kill_tree(process.pid)
        if not out_path.exists():
            return {"error": f"the run died (exit {process.returncode}) before its result"}, stderr
        return json.loads(out_path.read_text()), stderr


def _kill_tree(pid: int) -> None:
    """The plan's process group, and any worker that left it (a new session of its own)."""
    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        children = []
    for child in children:
        try:
            child.kill()
        except psutil.Error:
            pass
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def explain(plan: dict[str, Any], problems: list[str], stderr: str = "") -> str:
    """The failure message of a plan: what broke, the plan, and the replay command."""
    tail = "\n".join(stderr.strip().splitlines()[-25:])
    return (
        f"chaos plan {plan['seed']} broke the promise:\n  - "
        + "\n  - ".join(problems)
        + f"\nplan: {json.dumps(plan)}\nreplay: {replay_command(plan['seed'])}"
        + (f"\nits stderr (last lines):\n{tail}" if tail else "")
    )


def fresh_seed() -> int:
    return int.from_bytes(os.urandom(4), "big")


def main(argv: list[str]) -> int:
    """``python tests/chaos.py SEED [SEED ...]``: run each plan, print what it broke."""
    if not argv:
        print("usage: python tests/chaos.py SEED [SEED ...]", file=sys.stderr)
        return 2
    failed = 0
    for seed in (int(a) for a in argv):
        plan = generate(seed, stateful_available=_has_torchdata())
        started = time.monotonic()
        result, stderr = run_plan(plan)
        problems = check(plan, result)
        took = time.monotonic() - started
        if problems:
            failed += 1
            print(explain(plan, problems, stderr))
        else:
            print(f"chaos plan {seed}: kept the promise in {took:.1f} s ({result.get('status')})")
    return 1 if failed else 0


def _has_torchdata() -> bool:
    try:
        import torchdata.stateful_dataloader  # noqa: F401
    except ImportError:
        return False
    return True


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
