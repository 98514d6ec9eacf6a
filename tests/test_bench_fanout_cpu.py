"""bench.fanout_cpu: a short run delivers every event to every subscriber and names
the process with more CPU per event as the limit."""

from __future__ import annotations

import gc

import pytest

from bench import fanout_cpu

pytestmark = pytest.mark.integration


def test_short_run_measures_both_processes() -> None:
    # enough events for the broker's CPU time, counted in 10 ms clock ticks, to show
    result = fanout_cpu.run(subscribers=2, events=10_000, reps=1)
    assert (result["subscribers"], result["events"], result["repetitions"]) == (2, 10_000, 1)
    (sample,) = result["samples"]
    assert sample["events_per_s"] > 0
    # One repetition: each reported median is that sample's figure (to 0.1).
    for key in ("events_per_s", "broker_cpu_us_per_event", "client_cpu_us_per_event"):
        assert result[key] == pytest.approx(sample[key], abs=0.05), key
    broker, client = result["broker_cpu_us_per_event"], result["client_cpu_us_per_event"]
    assert 0 < broker < 100_000 and 0 < client < 100_000
    assert result["limited_by"] == ("client" if client > broker else "broker")


def test_the_collector_is_set_for_the_measured_runs_only() -> None:
    before = gc.get_threshold(), gc.isenabled()
    result = fanout_cpu.run(subscribers=1, events=2_000, reps=1, gc_mode="off")
    assert result["gc"] == "off" and result["samples"][0]["events_per_s"] > 0
    assert (gc.get_threshold(), gc.isenabled()) == before
    assert gc.get_freeze_count() == 0
