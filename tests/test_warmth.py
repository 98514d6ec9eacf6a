"""Samples carried from a low rate to a higher one by their processes' idle gaps."""

from __future__ import annotations

import numpy as np

from monitor.warmth import gaps_since, idle_gaps, matched


def test_idle_gaps_count_from_the_end_of_the_previous_handling() -> None:
    arrivals = np.array([0, 100, 150, 400])
    done = np.array([50, 200, 260, 450])
    gaps = idle_gaps(arrivals, done)
    assert np.isnan(gaps[0])
    assert gaps[1:].tolist() == [50, 0, 140]  # the third came while the second was handled


def test_gaps_since_the_latest_earlier_activity() -> None:
    gaps = gaps_since(np.array([5.0, 10.0, 31.0]), np.array([30.0, 0.0, 10.0]))
    assert gaps.tolist() == [5.0, 10.0, 1.0]  # strictly earlier: 10 counts from 0
    assert np.isnan(gaps_since(np.array([1.0]), np.array([2.0]))[0])


def test_a_cost_that_grows_with_the_gap_shrinks_with_the_rate() -> None:
    rng = np.random.default_rng(3)
    gaps = rng.exponential(10_000_000, 20_000)  # about 100 events/s
    cost = 100_000 + 0.01 * gaps  # 100 us plus 1 % of the idle time
    faster = matched(cost, gaps, 4.0, np.random.default_rng(1))
    expected = 100_000 + 0.01 * np.mean(gaps) / 4
    assert abs(faster.mean() / expected - 1) < 0.03
    assert set(faster) <= set(cost)  # measured samples, only drawn differently


def test_per_sample_scales_unknown_gaps_and_no_change() -> None:
    cost = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    gaps = np.array([np.nan, 10.0, 20.0, 30.0, 40.0, 50.0])
    rng = np.random.default_rng(0)
    assert np.array_equal(matched(cost, gaps, 1.0, rng), cost)
    out = matched(cost, gaps, np.array([9.0, 1.0, 1.0, 1.0, 1.0, 100.0]), rng)
    assert out[0] == 1.0  # no gap known: kept
    assert out[5] in {2.0, 3.0, 4.0}  # gap 50 / 100 = 0.5: among the shortest gaps
    assert matched(np.array([]), np.array([]), 3.0, rng).size == 0
