"""A trial's rate is taken between a pipeline's worth of arrivals at each end of its window
(``measure.Arrivals``), not from the first batch on: the workers start together, so the first
round's other batches arrive right after the first, their work done before the window began"""

from __future__ import annotations

import pytest

from loaderdoctor.tune.measure import Arrivals


def fill(arrivals: Arrivals, times: list[float], samples: int = 4) -> None:
    for at in times:
        arrivals.add(at, samples)


def rounds(workers: int, period: float, count: int, start: float = 1.0) -> list[float]:
    """``count`` rounds of ``workers`` batches that all finish together, every ``period`` s."""
    return [start + r * period + w * 0.001 for r in range(count) for w in range(workers)]


def test_a_burst_at_the_start_is_not_counted_as_the_windows_work() -> None:
    # 4 workers at prefetch_factor 1 deliver a round of 4 batches every second: 4 batches/s
    times = rounds(4, 1.0, 3)
    arrivals = Arrivals(4)
    fill(arrivals, times)
    samples_per_s, batches_per_s = arrivals.rates() or (0.0, 0.0)
    assert batches_per_s == pytest.approx(4.0)
    assert samples_per_s == pytest.approx(16.0)
    counted = (len(times) - 1) / (times[-1] - times[0])  # every batch from the first: 5.5/s
    assert counted > 1.3 * batches_per_s


def test_workers_out_of_step_give_the_same_rate() -> None:
    # the same 4 batches/s, the workers a quarter of a period apart, not together
    times = [1.0 + index * 0.25 for index in range(12)]
    arrivals = Arrivals(4)
    fill(arrivals, times)
    assert (arrivals.rates() or (0.0, 0.0))[1] == pytest.approx(4.0)


def test_the_window_is_complete_when_two_pipelines_worth_arrived() -> None:
    arrivals = Arrivals(3)
    for number in range(6):
        assert not arrivals.complete()
        arrivals.add(float(number), 4)
    assert arrivals.complete()


def test_a_window_cut_short_uses_half_of_what_arrived() -> None:
    arrivals = Arrivals(8)  # 8 in flight, but the iterable ended after 4 batches
    assert arrivals.rates() is None
    fill(arrivals, [0.0])
    assert arrivals.rates() is None
    fill(arrivals, [0.5, 1.0, 1.5])
    # blocks of 2: means 0.25 and 1.25, 2 batches after the first block
    assert arrivals.rates() == pytest.approx((8.0, 2.0))


def test_in_the_main_process_it_is_the_plain_rate() -> None:
    arrivals = Arrivals(0)  # 0 workers: one batch in flight
    fill(arrivals, [0.5, 1.0, 1.5, 2.5], samples=8)
    assert arrivals.rates() == pytest.approx((24 / 2.0, 3 / 2.0))


def test_a_batch_of_another_size_counts_its_own_samples() -> None:
    arrivals = Arrivals(1)
    fill(arrivals, [0.0, 1.0], samples=32)
    arrivals.add(2.0, 5)  # the last, short batch of an iterable
    assert arrivals.rates() == pytest.approx((37 / 2.0, 1.0))
