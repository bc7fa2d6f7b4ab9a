"""A throughput model over worker counts, fitted to every measured count at once.

On cores shared with ``others`` runnable processes the scheduler gives each its turn, so ``n``
workers get about ``cores * n / (n + others)`` of the cores (and never more than ``n`` of them):
``rate(n) = per_core * min(n, cores * n / (n + others))``. With no other processes that is
``min(n, cores)``, the saturating curve of compute; with many it is nearly proportional to ``n``,
the curve of I/O latency. Fitting the one curve to all trials pools their noise: on a loaded
2-core machine single trials went 449/426/396/593/347 samples/s at 1/2/4/8/16 workers, which is
no curve at all, while the fitted one says where the rate still climbs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# ``others`` tried in the fit: 0, then geometric steps up to where the curve is a straight line
OTHERS_STEPS = [0.0] + [0.25 * 1.25**step for step in range(48)]


def share(workers: int, others: float, cores: int) -> float:
    """The cores ``workers`` processes get beside ``others`` runnable ones."""
    if workers <= 0:
        return 0.0
    return min(float(workers), cores * workers / (workers + others))


def others_from_queue(queued: float, cores: int) -> float:
    """Runnable processes beside one that waited ``queued`` of its time for a CPU: one process
    among ``1 + others`` on ``cores`` gets ``cores / (1 + others)`` of a CPU."""
    if queued >= 1:
        return OTHERS_STEPS[-1]
    return max(0.0, cores / (1 - queued) - 1)


@dataclass(frozen=True)
class Throughput:
    per_core: float  # samples/s one core's worth of a worker delivers
    others: float  # runnable processes beside the workers
    cores: int
    spread: float  # the relative root-mean-square residual of the trials it was fitted to

    def predict(self, workers: int) -> float:
        return self.per_core * share(workers, self.others, self.cores)


def fit(
    points: list[tuple[int, float]], cores: int, queued: float | None = None
) -> Throughput | None:
    """The curve through (workers, samples/s) points, one per trial (repeats count each).

    ``others`` is fitted when three or more worker counts were measured, and else taken from the
    0-worker trial's queued share ``queued``; ``per_core`` is then the least-squares factor. The
    error is relative, so the slow counts weigh as much as the fast.
    """
    points = [(n, rate) for n, rate in points if n >= 1 and rate > 0]
    if not points:
        return None
    counts = {n for n, _rate in points}
    if len(counts) >= 3:
        candidates = OTHERS_STEPS
    elif queued is not None:
        candidates = [others_from_queue(queued, cores)]
    else:
        candidates = [0.0]
    best: Throughput | None = None
    for others in candidates:
        # minimise sum((k * s / r - 1)^2): k = sum(s / r) / sum((s / r)^2)
        scaled = [share(n, others, cores) / rate for n, rate in points]
        per_core = sum(scaled) / sum(x * x for x in scaled)
        spread = math.sqrt(sum((per_core * x - 1) ** 2 for x in scaled) / len(scaled))
        if best is None or spread < best.spread - 1e-12:
            best = Throughput(per_core, others, cores, spread)
    return best
