"""A death that came again when its sample was re-tried alone: the sample's doing.

A worker killed at a sample says little by itself (a scheduler, the OOM killer, a watchdog). The
same sample killing a fresh worker of its own, with nothing else loading, is decisive: the
failure follows the sample, not the machine. The verdict keeps its cause id (the contract's,
``DESIGN.md``) and says so first: a title naming the sample, the proof as the first evidence line
(the terminal summary shows the first three), and fixes about the sample.
"""

from __future__ import annotations

from typing import Any

from loaderdoctor.forensics.evidence import Diagnosis

# Causes whose own title blames something other than the sample: retitled when reproduced alone.
RETITLED = {
    "killed-by-signal": (
        "The sample kills its worker: the kill came again when it was re-tried alone",
        "Re-tried alone in a fresh worker, with nothing else loading, this sample killed the "
        "worker again: the kill follows the sample, not the machine or a scheduler. Usually a "
        "memory blow-up while loading it where the OOM killer's record cannot be read here (a "
        "container without the kernel log, an OOM killer outside the kernel such as "
        "systemd-oomd or a Kubernetes eviction), or a library that kills its own process (a "
        "decoder's watchdog, os.kill in a timeout handler).",
        (
            "Load the sample in a separate process and watch its memory: "
            "`/usr/bin/time -v python -c 'import train; train.dataset[INDEX]'` (maximum resident "
            "set size).",
            "Look for kill(2)/os.kill and watchdog timeouts in the libraries that decode it.",
            "Keep training past it: heal=True quarantines it (it was, here); `loaderdoctor scan` "
            "finds every such sample ahead of a run.",
        ),
    ),
    "worker-exit": (
        "The sample makes its worker exit: it did again when it was re-tried alone",
        "Re-tried alone in a fresh worker this sample made the worker exit again: code run for "
        "it calls exit()/os._exit() or a library aborts the process with an exit status.",
        (
            "Load the sample in the main process (`dataset[INDEX]`, num_workers=0) to see the "
            "message printed before the exit.",
            "Keep training past it: heal=True quarantines it (it was, here).",
        ),
    ),
}


def reproduced_alone(diagnosis: Diagnosis, culprit: Any) -> None:
    """Turn ``diagnosis`` into the verdict on a sample whose re-try alone failed again."""
    if diagnosis.signal:
        again = f"killed it again ({diagnosis.signal})"
    elif diagnosis.exit_code is not None:
        again = f"made it exit again (code {diagnosis.exit_code})"
    else:
        again = "failed again"
    diagnosis.evidence.insert(
        0,
        f"re-tried alone in a fresh worker, sample {culprit!r} {again}: the failure follows "
        "the sample",
    )
    retitled = RETITLED.get(diagnosis.cause)
    if retitled is None:
        return
    title, explanation, fixes = retitled
    diagnosis.title = title
    diagnosis.explanation = explanation
    diagnosis.fixes = [fix.replace("INDEX", repr(culprit)) for fix in fixes]
    diagnosis.confidence = max(diagnosis.confidence, 0.9)


__all__ = ["RETITLED", "reproduced_alone"]
