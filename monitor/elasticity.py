"""Service times and delays carried to another rate by how they changed between two
characterization runs of the same workload at two rates.

On this project's hosts (VMs sharing their cores) every stage of an event's path costs
less when the whole host is busier: routing in a broker, the hop between two brokers,
the hand-over to a client, and the CPU each process spends per event off the path.
Part of that is the receiving process's own idle gap (`monitor.warmth`), but most of
it is a state of the host that one run at one rate does not show (README, "Predicting
three times the load": the brokers' service times at 3x fall much further than their
processes' idle gaps explain).

Two runs show it. Between a run at rate r1 and one at r2, each stage's mean moves by a
factor; taken as a power of the rate, mean(r) = mean(r1) * (r / r1) ** beta with beta =
ln(mean(r2) / mean(r1)) / ln(r2 / r1) (the stage's *elasticity*), the samples of the
run nearer the target are scaled to the target rate. `tests/test_model_validation.py`
checks the result against real processes (tree7 at 1x and 1.5x, predicted and
measured at 3x; README, "Predicting three times the load").

Assumptions: the two runs carry the same workload (same publishers, trees and
subscriptions) at different rates; a stage's elasticity is the same at every rate
between and beyond them (extrapolating far, or past saturation, is not supported);
the relative spread of each stage's samples does not change with the rate.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from monitor.characterize import Characterization

BETA_LIMIT = 2.0
"""Elasticities beyond +-this are taken as noise of short runs and clipped."""


def total_rate(char: Characterization) -> float:
    """Publications per second of the run (all publishers)."""
    return float(sum(char.rates.values()))


def elasticity(low_mean: float, high_mean: float, rate_ratio: float) -> float:
    """The exponent beta with high_mean = low_mean * rate_ratio ** beta (0 when either
    mean is not positive or the rates are equal), clipped to +-`BETA_LIMIT`."""
    if low_mean <= 0 or high_mean <= 0 or rate_ratio <= 0 or math.isclose(rate_ratio, 1.0):
        return 0.0
    beta = math.log(high_mean / low_mean) / math.log(rate_ratio)
    return max(-BETA_LIMIT, min(BETA_LIMIT, beta))


def _mean(samples: np.ndarray) -> float:
    return float(np.mean(samples)) if len(samples) else 0.0


def at_rate(low: Characterization, high: Characterization, target_rate: float) -> Characterization:
    """`low` (the reference run: its workload, trees and rates) with every service time,
    delay and off-path CPU figure taken from whichever of `low` and `high` ran nearer
    `target_rate` (publications per second, all publishers) and scaled to it by its
    stage's elasticity between the two runs."""
    low_rate, high_rate = total_rate(low), total_rate(high)
    if low_rate <= 0 or high_rate <= 0:
        raise ValueError("both characterization runs must have published events")
    if target_rate <= 0:
        raise ValueError(f"the target rate must be positive, not {target_rate}")
    if set(low.brokers) != set(high.brokers):
        raise ValueError(f"the two runs traced different brokers: {low.brokers} and {high.brokers}")
    ratio = high_rate / low_rate
    # The samples of the run whose rate is nearer the target's (in log terms).
    use_high = abs(math.log(target_rate / high_rate)) < abs(math.log(target_rate / low_rate))
    source = high if use_high else low
    step = target_rate / (high_rate if use_high else low_rate)

    def factor(low_mean: float, high_mean: float) -> float:
        return step ** elasticity(low_mean, high_mean, ratio)

    def scaled(field: str) -> np.ndarray:
        low_samples, high_samples = getattr(low, field), getattr(high, field)
        f = factor(_mean(low_samples), _mean(high_samples))
        return np.asarray(getattr(source, field), dtype=float) * f

    service, by_fanout, overhead = {}, {}, {}
    for b in low.brokers:
        f = factor(_mean(low.service_ns[b]), _mean(high.service_ns[b]))
        service[b] = np.asarray(source.service_ns[b], dtype=float) * f
        by_fanout[b] = {
            k: np.asarray(v, dtype=float) * f for k, v in source.service_by_fanout[b].items()
        }
        overhead[b] = source.overhead_ns[b] * factor(low.overhead_ns[b], high.overhead_ns[b])
    return dataclasses.replace(
        source,
        # what defines the workload and the reference rates: the low run's
        run_dir=low.run_dir,
        manifest=low.manifest,
        brokers=low.brokers,
        home=low.home,
        trees=low.trees,
        rates=low.rates,
        window_s=low.window_s,
        # what the host does at the target rate
        service_ns=service,
        service_by_fanout=by_fanout,
        overhead_ns=overhead,
        link_delay_ns=scaled("link_delay_ns"),
        publish_delay_ns=scaled("publish_delay_ns"),
        deliver_delay_ns=scaled("deliver_delay_ns"),
        client_cpu_per_event_s=source.client_cpu_per_event_s
        * factor(low.client_cpu_per_event_s, high.client_cpu_per_event_s),
        problems=[*low.problems, *high.problems],
    )
