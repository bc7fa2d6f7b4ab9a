"""How a stopped ``StatefulDataLoader`` pool goes on: from torchdata's own state at the last batch
delivered, its sampler's tail (``SamplerTail``), and each worker's stream position
(``streams``): ``Recovery``'s ``resume_point`` and ``successor`` for torchdata's iterator.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

from loaderdoctor.supervise.parent.recovery import Successor
from loaderdoctor.supervise.torchdata.sampler_tail import SamplerTail
from loaderdoctor.supervise.torchdata.streams import plan_resumes


def resume_point(ref: weakref.ref[Any]) -> tuple[Any, SamplerTail, Any]:
    """Where a stopped stateful pool goes on: torchdata's state at the last batch delivered,
    its sampler's tail, and (IterableDataset) where each worker's stream goes on."""
    iterator = ref()
    assert iterator is not None  # asked by its own Recovery, while it handles a failure
    state = iterator._ld_resumed_from or iterator.state_dict()  # died while resuming: again
    tail = SamplerTail(list(iterator._ld_drawn), iterator.ld_sampler_iter)
    return state, tail, plan_resumes(iterator, state)


def successor(iterator_class: Callable[..., Any], plan: Successor) -> Any:
    """The pool that goes on from a stopped one (an ``iterator_class``, torchdata's supervised
    iterator), at its ``resume_point``; it counts the batches it yields itself."""
    state, tail, streams = plan.resume_point
    successor = iterator_class(plan.snapshot, state, plan.supervision, plan.respawns, tail, streams)
    successor._ld_serves = 1
    return successor


__all__ = ["resume_point", "successor"]
