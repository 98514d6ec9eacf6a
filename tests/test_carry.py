"""Stages carried to another load by how they changed between runs at other rates
(monitor.carry)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from monitor.carry import FACTOR_LIMITS, carried, fitted_line, rate_groups, target_busy
from monitor.characterize import Characterization

# The synthetic host: its processes spend CPU_A + CPU_B * U seconds per publication when
# U of its cores are busy, so at a total rate R they keep U = R CPU_A / (1 - R CPU_B) busy.
CPU_A, CPU_B = 0.004, -0.005
# Each stage's mean as a line in U: mean = base * (1 + slope * U).
SLOPES = {"link": -0.6, "publish": -1.0, "deliver": 0.0, "service": -0.8, "overhead": -1.2}


def busy_at(rate: float) -> float:
    return rate * CPU_A / (1 - rate * CPU_B)


def run(
    rate: float, brokers: tuple[str, ...] = ("1", "2"), seed: int = 0, slow: float = 1.0
) -> Characterization:
    """A characterization at `rate` events/s (two publishers at half the rate each) on
    the synthetic host, each stage's samples spread around the mean `SLOPES` gives;
    `slow` times that, as in a run the host disturbed."""
    rng = np.random.default_rng(seed)
    busy = busy_at(rate)

    def at_load(stage: str, base: float) -> float:
        return slow * base * (1 + SLOPES[stage] * busy)

    def samples(stage: str, base: float, n: int = 2000) -> np.ndarray:
        spread = rng.exponential(1.0, n)
        return at_load(stage, base) * spread / spread.mean()

    service = {b: samples("service", 100_000.0 * int(b)) for b in brokers}
    gaps = {b: np.zeros(len(v)) for b, v in service.items()}
    return Characterization(
        run_dir=Path(f"/runs/{rate}"),
        manifest={"rate": rate},
        brokers=list(brokers),
        service_ns=service,
        service_by_fanout={b: {1: v[:1000], 2: v[1000:]} for b, v in service.items()},
        overhead_ns={b: at_load("overhead", 400_000.0) for b in brokers},
        home={"pub1": brokers[0], "pub2": brokers[-1]},
        trees={"pub1": [], "pub2": []},
        link_delay_ns=samples("link", 400_000.0),
        publish_delay_ns=samples("publish", 500_000.0),
        deliver_delay_ns=samples("deliver", 350_000.0),
        service_gap_ns=gaps,
        service_by_fanout_gap_ns={b: {1: g[:1000], 2: g[1000:]} for b, g in gaps.items()},
        link_gap_ns=np.zeros(2000),
        link_broker=np.array([brokers[0]] * 2000),
        publish_gap_ns=np.zeros(2000),
        publish_broker=np.array([brokers[0]] * 2000),
        deliver_gap_ns=np.zeros(2000),
        link_sender=np.array([brokers[-1]] * 2000),
        deliver_subscriber=np.array(["sub1"] * 2000),
        deliver_publisher=np.array(["pub1"] * 2000),
        client_cpu_per_event_s=at_load("overhead", 0.001),
        busy_cores=slow * busy,
        rates={"pub1": rate / 2, "pub2": rate / 2},
        cores=2,
        window_s=10.0,
    )


def test_a_least_squares_line_and_a_flat_one_without_spread() -> None:
    assert fitted_line([1.0, 2.0], [10.0, 8.0]) == pytest.approx((12.0, -2.0))
    assert fitted_line([1.0, 2.0, 3.0], [10.0, 8.5, 6.0]) == pytest.approx((73 / 6, -2.0))
    assert fitted_line([2.0, 2.0], [10.0, 12.0]) == (11.0, 0.0)  # one load says nothing
    assert fitted_line([2.0], [10.0]) == (10.0, 0.0)


def test_the_target_keeps_the_host_as_busy_as_its_cpu_per_event_says() -> None:
    rates = [45.0, 90.0]
    busy = [busy_at(r) for r in rates]
    got = target_busy(busy, rates, 135.0, cores=2)
    assert got == pytest.approx(busy_at(135.0))
    assert got == pytest.approx(135.0 * (CPU_A + CPU_B * got))  # U = R c(U)
    # far beyond: the CPU per event stops falling at half the least measured, and the
    # host has two cores
    assert target_busy(busy, rates, 500.0, cores=2) == pytest.approx(
        500.0 * FACTOR_LIMITS[0] * busy[1] / rates[1]
    )
    assert target_busy(busy, rates, 5000.0, cores=2) == 2.0
    # CPU per event growing with the load as fast as the rate: no balance
    assert target_busy([0.1, 0.4], [10.0, 20.0], 50.0, cores=8) == pytest.approx(
        50.0 * FACTOR_LIMITS[1] * 0.4 / 20.0
    )


def test_stages_are_carried_to_three_times_the_rate() -> None:
    low, high = run(45.0), run(67.5, seed=1)
    carried_ = carried([low, high], 135.0)
    truth = run(135.0, seed=2)

    def close(got: float, want: float) -> None:
        assert got == pytest.approx(want, rel=0.02)

    for field in ("link_delay_ns", "publish_delay_ns", "deliver_delay_ns"):
        close(getattr(carried_, field).mean(), getattr(truth, field).mean())
    for b in ("1", "2"):
        close(carried_.service_ns[b].mean(), truth.service_ns[b].mean())
        close(carried_.overhead_ns[b], truth.overhead_ns[b])
        both = np.concatenate(list(carried_.service_by_fanout[b].values()))
        close(both.mean(), truth.service_ns[b].mean())
    close(carried_.client_cpu_per_event_s, truth.client_cpu_per_event_s)


def test_samples_come_from_the_nearer_run_and_the_workload_from_the_first() -> None:
    low, high = run(45.0), run(67.5, seed=1)
    carried_ = carried([low, high], 135.0)
    factor = carried_.link_delay_ns / high.link_delay_ns  # the 1.5x run is nearer 3x
    assert np.allclose(factor, factor[0])  # one factor: the spread is kept
    line = 1 + SLOPES["link"] * busy_at(135.0)
    assert factor[0] == pytest.approx(line / (1 + SLOPES["link"] * busy_at(67.5)), rel=0.02)
    assert carried_.busy_cores == pytest.approx(busy_at(135.0))
    near_low = carried([low, high], 40.0)
    want = (1 + SLOPES["publish"] * busy_at(40.0)) / (1 + SLOPES["publish"] * busy_at(45.0))
    assert np.allclose(near_low.publish_delay_ns / low.publish_delay_ns, want, rtol=0.02)
    assert (carried_.rates, carried_.run_dir, carried_.trees) == (low.rates, low.run_dir, low.trees)


def test_runs_that_do_not_match_are_refused() -> None:
    with pytest.raises(ValueError, match="different brokers"):
        carried([run(45.0), run(67.5, brokers=("1", "3"))], 135.0)
    with pytest.raises(ValueError, match="positive"):
        carried([run(45.0), run(67.5)], 0.0)
    silent = run(67.5)
    silent.rates = {"pub1": 0.0}
    with pytest.raises(ValueError, match="published"):
        carried([run(45.0), silent], 135.0)
    with pytest.raises(ValueError, match="two different rates"):
        carried([run(45.0), run(46.0, seed=1)], 135.0)
    with pytest.raises(ValueError, match="no characterization"):
        carried([], 135.0)
    unmeasured = run(67.5)
    unmeasured.busy_cores = float("nan")
    with pytest.raises(ValueError, match="CPU figures"):
        carried([run(45.0), unmeasured], 135.0)


def test_a_carried_mean_stays_within_the_limits_of_the_nearest() -> None:
    low, high = run(45.0), run(67.5, seed=1)
    high.link_delay_ns = high.link_delay_ns / 10  # a line that would fall below zero
    got = carried([low, high], 200.0)
    assert got.link_delay_ns.mean() == pytest.approx(FACTOR_LIMITS[0] * high.link_delay_ns.mean())


def test_runs_at_about_one_rate_are_repeats() -> None:
    runs = [run(67.5), run(45.0), run(46.0), run(70.0), run(90.0)]
    assert [[r.run_dir.name for r in g] for g in rate_groups(runs)] == [
        ["45.0", "46.0"],
        ["67.5", "70.0"],
        ["90.0"],
    ]


def test_a_disturbed_repeat_is_outvoted_and_the_samples_pooled() -> None:
    lows = [run(45.0, seed=1), run(45.0, seed=2, slow=1.4), run(45.0, seed=3)]
    highs = [run(67.5, seed=4), run(67.5, seed=5), run(67.5, seed=6, slow=0.7)]
    got = carried([*lows, *highs], 135.0)
    truth = run(135.0, seed=7)
    for b in ("1", "2"):
        assert got.service_ns[b].mean() == pytest.approx(truth.service_ns[b].mean(), rel=0.02)
        assert len(got.service_ns[b]) == 3 * len(truth.service_ns[b])  # the 1.5x runs'
    assert got.link_delay_ns.mean() == pytest.approx(truth.link_delay_ns.mean(), rel=0.02)
    assert got.run_dir == lows[0].run_dir
    # one disturbed pair alone is far off
    alone = carried([lows[1], highs[2]], 135.0)
    assert abs(alone.link_delay_ns.mean() / truth.link_delay_ns.mean() - 1) > 0.3


def test_without_a_trend_every_run_is_pooled_as_measured() -> None:
    low, high = run(45.0), run(67.5, seed=1)
    got = carried([low, high], 135.0, trend="none")
    assert np.array_equal(
        got.link_delay_ns, np.concatenate([low.link_delay_ns, high.link_delay_ns])
    )
    for b in ("1", "2"):
        assert np.array_equal(
            got.service_ns[b], np.concatenate([low.service_ns[b], high.service_ns[b]])
        )
        assert np.array_equal(
            got.service_gap_ns[b], np.concatenate([low.service_gap_ns[b], high.service_gap_ns[b]])
        )
    # the CPU figures still follow their lines: the host is busier at three times the rate
    line = carried([low, high], 135.0)
    assert got.busy_cores == line.busy_cores == pytest.approx(busy_at(135.0))
    assert got.client_cpu_per_event_s == line.client_cpu_per_event_s
    assert got.overhead_ns == line.overhead_ns
    with pytest.raises(ValueError, match="unknown trend"):
        carried([low, high], 135.0, trend="curve")
