"""Plain-text verdicts: the message of the exception a user sees (used by the core and by report/)."""

from __future__ import annotations

import signal

from loaderdoctor.forensics.catalog import page_command
from loaderdoctor.forensics.evidence import Diagnosis

MAX_STACK_LINES = 24


def format_subject(d: Diagnosis) -> str:
    """Which worker, which sample: '`worker 1 (pid 4242), sample 37 (/data/x.jpg), batch 9`'."""
    parts = []
    if d.worker_id is not None:
        parts.append(f"worker {d.worker_id}" + (f" (pid {d.pid})" if d.pid else ""))
    if d.indices:
        label = "sample" if len(d.indices) == 1 else "samples"
        shown = ", ".join(repr(i) for i in d.indices[:8])
        if len(d.indices) > 8:
            shown += f", … ({len(d.indices)} in all)"
        text = f"{label} {shown}"
        if d.sample_file:
            text += f" ({d.sample_file})"
        if d.shard:
            text += f" in shard {d.shard}"
        parts.append(text)
    elif d.position is not None:  # a stream's culprit: its place in its worker's stream
        named = [f"key {d.key!r}"] if d.key is not None else []
        named += [d.sample_file] if d.sample_file else []
        parts.append(f"item #{d.position}" + (f" ({', '.join(named)})" if named else ""))
    if d.batch is not None:
        parts.append(f"batch {d.batch}")
    if d.epoch:
        parts.append(f"epoch {d.epoch}")
    return ", ".join(parts)


def crashing_thread_first(dump: str) -> str:
    """faulthandler lists the crashing ("Current") thread last; readers want it first."""
    blocks = [b for b in dump.strip().split("\n\n") if b.strip()]
    current = [b for b in blocks if "Current thread" in b]
    header = [b for b in blocks if b.startswith("Fatal Python error")]
    others = [b for b in blocks if b not in current and b not in header]
    return "\n\n".join([*header, *current, *others])


def format_verdict(d: Diagnosis, *, include_stack: bool = True) -> str:
    lines = [f"loaderdoctor verdict: {d.title} [{d.cause}, confidence {d.confidence:.2f}]"]
    subject = format_subject(d)
    if subject:
        lines.append(f"  {subject}")
    if d.evidence:
        lines.append("  evidence:")
        lines.extend(f"    - {line}" for line in d.evidence)
    if include_stack and d.python_stack:
        stack = crashing_thread_first(d.python_stack).splitlines()
        if len(stack) > MAX_STACK_LINES:
            stack = [*stack[:MAX_STACK_LINES], f"... ({len(stack) - MAX_STACK_LINES} more lines)"]
        lines.append("  Python stack of the worker:")
        lines.extend(f"    {line}" for line in stack)
    if d.fixes:
        lines.append("  fix:")
        lines.extend(f"    - {fix}" for fix in d.fixes)
    others = [f"{cause} ({score:.2f})" for cause, score in d.alternatives if score >= 0.3]
    if others:
        lines.append(f"  also possible: {', '.join(others)}")
    if d.docs:
        lines.append(f"  more: {page_command(d.cause)}")
    return "\n".join(lines)


def format_death_headline(d: Diagnosis) -> str:
    """torch's own first line, word for word (log scrapers, searches and tests match it), then ours.

    The wording is that of torch's SIGCHLD check (``torch/csrc/DataLoader.cpp``).
    """
    pid = d.pid if d.pid is not None else "?"
    if d.cause == "worker-hang":
        who = f"DataLoader worker {d.worker_id}" if d.worker_id is not None else "DataLoader worker"
        return f"{who} (pid {pid}) made no progress and was killed. {d.title}."
    if d.signal:
        number = getattr(signal.Signals, d.signal, None)
        name = (signal.strsignal(number) if number is not None else None) or d.signal
        line = f"DataLoader worker (pid {pid}) is killed by signal: {name}. "
        if d.signal == "SIGBUS":
            line += (
                "It is possible that dataloader's workers are out of shared memory. "
                "Please try to raise your shared memory limit."
            )
        return line
    if d.exit_code is not None:
        return (
            f"DataLoader worker (pid {pid}) exited unexpectedly with exit code {d.exit_code}. "
            "Details are lost due to multiprocessing. Rerunning with num_workers=0 may give "
            "better error trace."
        )
    return f"DataLoader worker (pid {pid}) failed. {d.title}."
