"""A trial's rate is each worker's own rate, summed (``measure.Arrivals``), not every batch of the
window over its length: the workers start together, so the first round's other batches arrive
right after the first, their work done before the window began (issue 29)."""

from __future__ import annotations

import pytest

from loaderdoctor.tune.measure import LANE_BATCHES, Arrivals


def fill(arrivals: Arrivals, times: list[float], samples: int = 4) -> None:
    for at in times:
        arrivals.add(at, samples)


def test_a_burst_at_the_start_is_not_counted_as_the_windows_work() -> None:
    # two workers, one batch a second each; worker 1's first batch finished with worker 0's,
    # and every later one too: in order, w0 w1 w0 w1 ...
    times = [0.0, 0.01, 1.0, 1.01, 2.0, 2.01]
    arrivals = Arrivals(2)
    fill(arrivals, times)
    samples_per_s, batches_per_s = arrivals.rates() or (0.0, 0.0)
    assert batches_per_s == pytest.approx(2.0)  # each worker: 2 batches in 2 s
    assert samples_per_s == pytest.approx(8.0)
    counted = (len(times) - 1) / (times[-1] - times[0])  # the whole window's count: 2.49/s
    assert counted > 1.2 * batches_per_s


def test_workers_out_of_step_each_count_from_their_own_first_batch() -> None:
    # worker 1 runs half a period behind worker 0 once the first round is over
    arrivals = Arrivals(2)
    fill(arrivals, [0.0, 0.02, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5])
    _samples, batches_per_s = arrivals.rates() or (0.0, 0.0)
    # worker 0: 3 in 3 s; worker 1: 3 in 3.48 s
    assert batches_per_s == pytest.approx(1.0 + 3 / 3.48)


def test_no_rate_until_every_worker_has_an_interval() -> None:
    arrivals = Arrivals(3)
    fill(arrivals, [0.0, 0.1, 0.2, 1.0, 1.1])  # worker 2 has delivered only its first
    assert arrivals.rates() is None and not arrivals.complete()
    fill(arrivals, [1.2])
    assert arrivals.rates() is not None and not arrivals.complete()


def test_the_window_is_complete_when_every_worker_delivered_lane_batches() -> None:
    arrivals = Arrivals(2)
    for number in range(2 * LANE_BATCHES):
        assert not arrivals.complete()
        arrivals.add(float(number), 4)
    assert arrivals.complete()


def test_in_the_main_process_it_is_the_plain_rate() -> None:
    arrivals = Arrivals(0)  # 0 workers: one lane, the main process
    fill(arrivals, [0.5, 1.0, 1.5, 2.5], samples=8)
    assert arrivals.rates() == pytest.approx((24 / 2.0, 3 / 2.0))


def test_a_batch_of_another_size_counts_its_own_samples() -> None:
    arrivals = Arrivals(1)
    arrivals.add(0.0, 32)
    arrivals.add(1.0, 32)
    arrivals.add(2.0, 5)  # the last, short batch of an iterable
    assert arrivals.rates() == pytest.approx((37 / 2.0, 1.0))
