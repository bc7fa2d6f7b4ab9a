"""Where tune's time goes: the persistent-workers restart check rides along with the
pick's second look instead of starting a loader of its own."""

from __future__ import annotations

import itertools

import pytest

from loaderdoctor.tune import LoaderConfig, MeasureSettings, Trial
from loaderdoctor.tune import measure as measure_trial
from loaderdoctor.tune.core import restarts
from loaderdoctor.tune.measure import CyclingSampler
from test_tune import Counting


def test_the_cycling_sampler_ends_an_epoch_when_told_and_starts_the_next_over() -> None:
    sampler = CyclingSampler(3)
    epoch = iter(sampler)
    assert list(itertools.islice(epoch, 5)) == [0, 1, 2, 0, 1]
    sampler.end_epoch()
    assert list(epoch) == []
    assert list(itertools.islice(iter(sampler), 4)) == [0, 1, 2, 0]


def test_the_restart_check_comes_from_the_picks_last_trial_that_measured_it() -> None:
    pick = LoaderConfig.make(4)

    def look(config: LoaderConfig, startup: float, restart: float | None) -> Trial:
        return Trial(config=config, phase="repeat", startup_s=startup, restart_s=restart)

    failed = look(pick, 0.9, 0.05)
    failed.status = "failed"
    trials = [
        look(pick, 0.8, None),  # the ladder's trial: no restart measured
        look(pick, 0.7, 0.04),
        look(LoaderConfig.make(8), 1.5, 0.06),  # the duel's other side
        failed,
    ]
    assert restarts(trials, pick) == (0.7, 0.04)
    assert restarts(trials, LoaderConfig.make(8)) == (1.5, 0.06)
    assert restarts(trials[:1], pick) is None
    assert restarts(trials, LoaderConfig.make(2)) is None


def test_without_its_own_the_pick_takes_the_restart_of_its_count_at_another_prefetch() -> None:
    # the prefetch trials run at the pick's count: the restart rides along with them too
    def look(config: LoaderConfig, startup: float, restart: float | None) -> Trial:
        return Trial(config=config, phase="prefetch", startup_s=startup, restart_s=restart)

    deeper = look(LoaderConfig.make(16, 4), 0.5, 0.03)
    pinned = look(LoaderConfig(16, 2, False, True), 0.6, 0.02)
    assert restarts([deeper, pinned], LoaderConfig.make(16)) == (0.5, 0.03)
    # its own, when it has one, wherever it comes
    own = look(LoaderConfig.make(16), 0.4, 0.05)
    assert restarts([own, deeper], LoaderConfig.make(16)) == (0.4, 0.05)
    assert restarts([deeper], LoaderConfig.make(8)) is None


@pytest.mark.slow
def test_a_trial_measures_the_restart_with_its_workers_kept() -> None:
    settings = MeasureSettings(batch_size=4, window_s=0.3)
    trial = measure_trial(Counting(), LoaderConfig.make(2), settings, restart=True)
    assert trial.ok, trial.note
    assert trial.restart_s is not None and trial.restart_s > 0
    assert trial.startup_s > 0 and trial.batches >= 2 * 2 * 2 - 1  # the window as without it
    assert trial.config == LoaderConfig.make(2)  # the plain configuration, as measured
    plain = measure_trial(Counting(), LoaderConfig.make(2), settings)
    assert plain.ok and plain.restart_s is None
