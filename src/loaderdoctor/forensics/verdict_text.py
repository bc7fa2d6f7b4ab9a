"""Plain-text verdicts: the message of the exception a user sees (used by the core and by report/)."""

from __future__ import annotations

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
        parts.append(text)
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
        lines.append(f"  more: {d.docs}")
    return "\n".join(lines)


def format_death_headline(d: Diagnosis) -> str:
    """Keeps torch's own wording first, so log scrapers and searches for it still match."""
    who = f"DataLoader worker {d.worker_id}" if d.worker_id is not None else "DataLoader worker"
    if d.pid:
        who += f" (pid {d.pid})"
    if d.cause == "worker-hang":
        what = "made no progress and was killed"
    elif d.signal:
        what = f"is killed by signal: {d.signal}"
    elif d.exit_code is not None:
        what = f"exited unexpectedly with code {d.exit_code}"
    else:
        what = "failed"
    return f"{who} {what}. {d.title}."
