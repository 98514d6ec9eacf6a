"""bench.tracing_loop drives the broker's read handling without sockets: a short run
routes every event, traced and not, and reports what it measured."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import trio

from bench import tracing_loop


def test_short_run_measures_both_modes() -> None:
    result = tracing_loop.run(events=3000, reps=2)
    samples_off, samples_on = result["samples"]["off"], result["samples"]["on"]
    assert len(samples_off) == len(samples_on) == 2
    assert result["events_per_repetition"] == 3000 and result["repetitions"] == 2
    off, on = result["off_cpu_us_per_event"], result["on_cpu_us_per_event"]
    assert 0 < off < 1000 and 0 < on < 1000
    # Each figure is the one its samples give: minima, and the median paired difference.
    assert off == pytest.approx(min(samples_off), abs=5e-4)
    assert on == pytest.approx(min(samples_on), abs=5e-4)
    assert result["tracing_us_per_event"] == pytest.approx(on - off, abs=0.002)
    assert result["tracing_cost_percent"] == pytest.approx((on / off - 1) * 100, abs=0.1)
    paired = float(np.median([a - b for a, b in zip(samples_on, samples_off, strict=True)]))
    assert result["paired_median_us_per_event"] == pytest.approx(paired, abs=5e-4)
    assert result["paired_median_cost_percent"] == pytest.approx(
        paired / float(np.median(samples_off)) * 100, abs=0.05
    )


@pytest.mark.parametrize("traced", [False, True])
def test_every_event_reaches_the_subscriber(
    traced: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loop = tracing_loop.LoopBroker(tmp_path / "traces" if traced else None)
    queued: list[int] = []
    drain = tracing_loop.drain

    def counting_drain(link: tracing_loop.Link) -> None:
        queued.append(link.queue.queued)
        drain(link)

    monkeypatch.setattr(tracing_loop, "drain", counting_drain)
    try:
        trio.run(loop.cpu_per_event_us, tracing_loop.reads_of(1000))
    finally:
        loop.close()
    assert sum(queued) == 1000
