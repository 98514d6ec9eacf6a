"""bench.tracing_overhead: a short run with real broker processes measures both, and
the interval it reports brackets the median."""

from __future__ import annotations

import numpy as np
import pytest

from bench import tracing_overhead
from broker.protocol import Deliver, Ping, encode_frame, frame_starts, join_frames


def test_short_run_pairs_a_traced_and_an_untraced_broker() -> None:
    result = tracing_overhead.run(events=20_000, rounds=1, pairs=2)
    assert result["pairs"] == 2 and result["events_per_segment"] == 20_000
    off, on = result["samples"]["off"], result["samples"]["on"]
    assert len(off) == len(on) == 2
    assert all(s["events_per_s"] > 0 and s["broker_cpu_us_per_event"] > 0 for s in off + on)
    assert result["on"]["writer_cpu_us_per_event"] > 0  # the traced broker's writer worked
    # The summary is what the samples say: medians, and per-pair ratios on/off.
    for mode, samples in (("off", off), ("on", on)):
        rate = float(np.median([s["events_per_s"] for s in samples]))
        cpu = float(np.median([s["broker_cpu_us_per_event"] for s in samples]))
        assert result[mode]["events_per_s"] == pytest.approx(rate, abs=0.05)
        assert result[mode]["broker_cpu_us_per_event"] == pytest.approx(cpu, abs=0.005)
    pairs = list(zip(on, off, strict=True))
    rate_ratios = [a["events_per_s"] / b["events_per_s"] for a, b in pairs]
    rate_ratio = float(np.median(rate_ratios))
    cpu_ratio = float(
        np.median([a["broker_cpu_us_per_event"] / b["broker_cpu_us_per_event"] for a, b in pairs])
    )
    assert result["throughput_ratio_on_off"] == pytest.approx(rate_ratio, abs=5e-4)
    assert result["throughput_cost_percent"] == pytest.approx((1 - rate_ratio) * 100, abs=0.05)
    assert result["cpu_ratio_on_off"] == pytest.approx(cpu_ratio, abs=5e-4)
    assert result["cpu_cost_percent"] == pytest.approx((cpu_ratio - 1) * 100, abs=0.05)
    assert result["target_met"] == (rate_ratio >= 0.95)
    low, high = result["throughput_ratio_ci95"]
    assert min(rate_ratios) - 5e-4 <= low <= high <= max(rate_ratios) + 5e-4
    assert low <= result["throughput_ratio_on_off"] <= high


def test_bootstrap_interval_of_the_median() -> None:
    values = list(np.random.default_rng(1).normal(1.0, 0.1, 400))
    low, high = tracing_overhead.bootstrap_median_interval(values)
    assert low < float(np.median(values)) < high
    assert high - low == pytest.approx(0.025, abs=0.015)  # ~ 2 x 1.96 x 1.25 x 0.1 / 20
    assert tracing_overhead.bootstrap_median_interval([2.0] * 5) == (2.0, 2.0)


@pytest.mark.parametrize("count", [1, 2, 15, 16, 300])
def test_delivers_are_counted_in_joined_frames(count: int) -> None:
    """The subscriber's count without decoding: a Deliveries frame counts its Delivers
    (fixarray and array 16 heads), a Deliver or another frame counts one."""
    frames = [encode_frame(Deliver([1], f"e{i}", "p", {"n": i}, [], i)) for i in range(count)]
    data = join_frames([encode_frame(Ping(1)), *frames])
    starts = frame_starts(data)
    assert len(starts) == (2 if count > 1 else 1 + count)
    assert sum(tracing_overhead.delivers_in(data, start) for start in starts) == 1 + count
