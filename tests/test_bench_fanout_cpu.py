"""bench.fanout_cpu: a short run delivers every event to every subscriber and names
the process with more CPU per event as the limit."""

from __future__ import annotations

import pytest

from bench import fanout_cpu

pytestmark = pytest.mark.integration


def test_short_run_measures_both_processes() -> None:
    # enough events for the broker's CPU time, counted in 10 ms clock ticks, to show
    result = fanout_cpu.run(subscribers=2, events=10_000, reps=1)
    (sample,) = result["samples"]
    assert sample["events_per_s"] > 0
    broker, client = result["broker_cpu_us_per_event"], result["client_cpu_us_per_event"]
    assert 0 < broker < 100_000 and 0 < client < 100_000
    assert result["limited_by"] == ("client" if client > broker else "broker")
