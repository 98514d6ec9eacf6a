"""Stages carried to another rate by how they changed between runs at other rates
(monitor.elasticity)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from monitor.characterize import Characterization
from monitor.elasticity import BETA_LIMIT, carried, fitted_elasticity, rate_groups

# Each stage's mean as a power of the total rate: mean = base * rate ** beta.
BETAS = {"link": -0.3, "publish": -0.5, "deliver": 0.0, "service": -0.4, "overhead": -0.6}


def run(
    rate: float, brokers: tuple[str, ...] = ("1", "2"), seed: int = 0, slow: float = 1.0
) -> Characterization:
    """A characterization whose stages follow `BETAS` at `rate` events/s (two publishers
    at half the rate each), with a spread of samples around each mean; `slow` times
    that, as in a run the host disturbed."""
    rng = np.random.default_rng(seed)

    def samples(stage: str, base: float, n: int = 2000) -> np.ndarray:
        spread = rng.exponential(1.0, n)
        return slow * base * rate ** BETAS[stage] * spread / spread.mean()

    service = {b: samples("service", 100_000.0 * int(b)) for b in brokers}
    gaps = {b: np.zeros(len(v)) for b, v in service.items()}
    return Characterization(
        run_dir=Path(f"/runs/{rate}"),
        manifest={"rate": rate},
        brokers=list(brokers),
        service_ns=service,
        service_by_fanout={b: {1: v[:1000], 2: v[1000:]} for b, v in service.items()},
        overhead_ns={b: 400_000.0 * rate ** BETAS["overhead"] for b in brokers},
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
        client_cpu_per_event_s=0.001 * rate ** BETAS["overhead"],
        rates={"pub1": rate / 2, "pub2": rate / 2},
        cores=2,
        window_s=10.0,
    )


def test_the_exponent_of_a_power_law_and_its_limits() -> None:
    assert fitted_elasticity([1.0, 1.5], [100.0, 100.0 * 1.5**-0.5]) == pytest.approx(-0.5)
    assert fitted_elasticity([2.0, 2.0], [100.0, 130.0]) == 0.0  # one rate says nothing
    assert fitted_elasticity([1.0, 2.0], [0.0, 130.0]) == 0.0
    assert fitted_elasticity([1.0, 2.0], [100.0, 0.0]) == 0.0
    assert fitted_elasticity([1.0, 2.0], [1.0, 1e6]) == BETA_LIMIT  # a short run's noise
    # more than two rates: the least-squares slope in log-log
    three = fitted_elasticity([1.0, 2.0, 4.0], [100.0, 100.0 * 2**-0.3 * 1.1, 100.0 * 4**-0.3])
    assert three == pytest.approx(-0.3, abs=0.01)


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
    assert factor[0] == pytest.approx((135.0 / 67.5) ** BETAS["link"], rel=0.05)
    near_low = carried([low, high], 40.0)
    assert np.allclose(
        near_low.publish_delay_ns / low.publish_delay_ns, (40 / 45) ** -0.5, rtol=0.05
    )
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
    assert alone.link_delay_ns.mean() < 0.6 * truth.link_delay_ns.mean()
