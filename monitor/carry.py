"""Service times and delays carried to another load by how they changed between
characterization runs of the same workload at different rates.

On this project's hosts (VMs sharing their cores) every stage of an event's path costs
less when the host's cores are busier: routing in a broker, the hop between two
brokers, the hand-over to a client, and the CPU each process spends per event off the
path. Part of that is the receiving process's own idle gap (`monitor.warmth`), but most
of it is a state of the whole host that one run at one rate does not show: the host's
CPU per publication falls as the rate rises (`python -m bench.rate_response` records
it; docs/accuracy.md).

Runs at two rates show it. Each run's *busy share* U is the CPU seconds per second its
processes (brokers and clients) spent in the measurement window
(`Characterization.busy_cores`). Each stage's mean is taken as a straight line in U,
fitted by least squares through the rates' (U, mean) points. The target's U follows
from the same kind of line for the host's CPU per publication, c(U) = a + b U: the
target rate R keeps the host busy U = R c(U), so U = R a / (1 - R b). The samples of the
rate nearest the target are then scaled to the stage's line at the target's U.

Why a line in the busy share: it is the cause the runs can measure, and of the forms
tried (a power of the rate, a line in the rate, a line in the busy share) it carried
the stages' means from 1x and 2x to 3x on tree7 with the least bias, on runs made
while the host was fast and while it was slow, and it gave
the model validation's prediction of three times the load (`bench.model_accuracy`)
its smallest worst-case error.

Runs at about the same rate (within `SAME_RATE`) are repeats: a stage's mean at that
rate is the median of the runs' means (and U the median of theirs), and their samples
are pooled. Repeats matter because extrapolating amplifies noise, and on a shared
2-core host one run's stage means move 10-20 % from one run to the next.

Whether the stages follow that line at all is an empirical question of the host and
the placement. With all clients in one process on tree7 (`bench.rate_response`) the
stages' costs fell by a fifth between one and three times the rate, and the line
carried them. With a process per client (the replay's default) on siena15, the stages'
means at 0.3 and 0.6 of the target load differed by no more than one run differs from
the next, and a line through two single runs doubles that noise at the target. So the
*trend* is a choice: `"line"` carries each stage (service times, delays) along its
line; `"none"` pools every run's samples as they are, as repeats of one load. The CPU
figures (the host's busy share, each broker's off-path CPU, the client's CPU per
event) follow their lines in both: they come from the processes' CPU counters, which
one run measures to within a percent, not from delays that move with the host.

Assumptions: the runs carry the same workload (same publishers, trees and
subscriptions) at different rates, on one host (`hop replay` starts every process on
it); each stage's mean and the host's CPU per publication are linear in U between and
beyond the runs (extrapolating far, or past saturation, is not supported: a carried
mean stays within `FACTOR_LIMITS` of the nearest rate's, and U within the host's
cores); the relative spread of each stage's samples does not change with the load.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING

import numpy as np

from monitor.errors import InputError

# Annotations only: `hop validate` checks its options with this module before it needs
# pandas.
if TYPE_CHECKING:
    from monitor.characterize import Characterization

FACTOR_LIMITS = (0.5, 2.0)
"""A stage's carried mean stays within these multiples of its mean at the nearest rate:
beyond them the line is taken as the noise of short runs, not a trend to follow."""

TRENDS = ("line", "none")
"""How the stages' costs are carried between loads (module doc)."""

SAME_RATE = 0.1
"""Runs whose total rates are within this fraction of each other are repeats of one rate."""


def total_rate(char: Characterization) -> float:
    """Publications per second of the run (all publishers)."""
    return float(sum(char.rates.values()))


def fitted_line(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """(intercept, slope) of the least-squares line of ys on xs; a flat line through the
    mean of ys when the xs do not differ."""
    x, y = np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)
    if len(x) < 2 or np.allclose(x, x[0]):
        return float(y.mean()), 0.0
    slope, intercept = np.polyfit(x, y, 1)
    return float(intercept), float(slope)


def target_busy(
    busy: Sequence[float], rates: Sequence[float], target_rate: float, cores: int
) -> float:
    """The host's busy share (cores) at `target_rate`, from runs that were `busy` at
    `rates`: U = R a / (1 - R b) for the line c(U) = a + b U of CPU per publication
    through the runs' (U, U / rate), with c kept within `FACTOR_LIMITS` of the CPU per
    publication the runs measured (a line that falls forever would let the host keep
    up with any rate); at most `cores`."""
    per_event = [u / r for u, r in zip(busy, rates, strict=True)]
    a, b = fitted_line(busy, per_event)
    lowest, highest = FACTOR_LIMITS[0] * min(per_event), FACTOR_LIMITS[1] * max(per_event)
    # U / R on the line; with no room, CPU per event grows with the load as fast as the
    # rate and there is no balance short of the limit
    room = 1.0 - target_rate * b
    cpu = highest if room <= 0 else min(highest, max(lowest, a / room))
    return min(float(cores), target_rate * cpu)


def rate_groups(runs: Sequence[Characterization]) -> list[list[Characterization]]:
    """The runs grouped by total rate, slowest first: a run joins the group of the
    slowest run within `SAME_RATE` above it."""
    groups: list[list[Characterization]] = []
    for run in sorted(runs, key=total_rate):
        if groups and total_rate(run) <= total_rate(groups[-1][0]) * (1 + SAME_RATE):
            groups[-1].append(run)
        else:
            groups.append([run])
    return groups


def _check(runs: Sequence[Characterization], target_rate: float) -> None:
    if not runs:
        raise InputError("no characterization runs given")
    reference = runs[0]
    for run in runs:
        if total_rate(run) <= 0:
            raise InputError(f"{run.run_dir}: no events published; every run must have published")
        if not run.busy_cores > 0:
            raise InputError(
                f"{run.run_dir}: the manifest has no CPU figures of the run's processes "
                "(phases.cpu_s, written by hop replay); carrying costs needs them"
            )
        if set(run.brokers) != set(reference.brokers):
            raise InputError(
                f"the runs traced different brokers: {reference.brokers} ({reference.run_dir}) "
                f"and {run.brokers} ({run.run_dir})"
            )
    if target_rate <= 0:
        raise InputError(f"the target rate must be positive, not {target_rate}")


def check_trend(trend: str) -> None:
    """InputError unless `trend` is one of `TRENDS`."""
    if trend not in TRENDS:
        raise InputError(f"unknown trend {trend!r}; use one of {TRENDS}")


def carried(
    runs: Sequence[Characterization], target_rate: float, trend: str = "line"
) -> Characterization:
    """`runs[0]` (the reference run: its workload, trees and rates) with every service
    time, delay and off-path CPU figure carried to `target_rate` (publications per
    second, all publishers). With `trend` "line", the pooled samples of the runs at the
    rate nearest the target (in log terms), scaled so that each stage's mean is on the
    stage's line in the host's busy share at the target's busy share; with "none",
    every run's samples pooled as they are. CPU figures follow their lines in both."""
    check_trend(trend)
    _check(runs, target_rate)
    reference = runs[0]
    groups = rate_groups(runs)
    if len(groups) < 2:
        raise InputError(
            f"the runs are all at about {total_rate(reference):.1f} events/s: carrying "
            "costs to another rate needs runs at two different rates"
        )

    def medians(stage: Callable[[Characterization], float]) -> list[float]:
        return [float(np.median([stage(r) for r in g])) for g in groups]

    rates, busy = medians(total_rate), medians(lambda r: r.busy_cores)
    busy_at_target = target_busy(busy, rates, target_rate, reference.cores)
    nearest = min(range(len(groups)), key=lambda i: abs(math.log(target_rate / rates[i])))
    near = groups[nearest] if trend == "line" else list(runs)

    def target_mean(stage: Callable[[Characterization], float]) -> float:
        means = medians(stage)
        intercept, slope = fitted_line(busy, means)
        low, high = FACTOR_LIMITS
        return float(
            np.clip(intercept + slope * busy_at_target, low * means[nearest], high * means[nearest])
        )

    def pooled(get: Callable[[Characterization], np.ndarray | Sequence[float]]) -> np.ndarray:
        """The arrays (samples, gaps or keys) of the runs drawn from, joined: the nearest
        rate's runs, or every run without a trend."""
        return np.concatenate([np.asarray(get(r)) for r in near])

    def factor(get: Callable[[Characterization], np.ndarray]) -> float:
        """What the pooled samples of a stage are multiplied by to reach its target mean."""
        if trend == "none":
            return 1.0
        mean = _mean(pooled(get))
        return target_mean(lambda r: _mean(get(r))) / mean if mean > 0 else 1.0

    def scaled(get: Callable[[Characterization], np.ndarray]) -> np.ndarray:
        return pooled(get) * factor(get)

    service, by_fanout, overhead = {}, {}, {}
    service_gaps, by_fanout_gaps = {}, {}
    for b in reference.brokers:
        f = factor(partial(_service, b))
        service[b] = pooled(partial(_service, b)) * f
        service_gaps[b] = pooled(partial(_service_gap, b))
        fanouts = sorted({k for r in near for k in r.service_by_fanout[b]})
        by_fanout[b] = {k: pooled(partial(_fanout_service, b, k)) * f for k in fanouts}
        by_fanout_gaps[b] = {k: pooled(partial(_fanout_service_gap, b, k)) for k in fanouts}
        overhead[b] = target_mean(partial(_overhead, b))
    return dataclasses.replace(
        reference,
        # what the host does at the target rate
        service_ns=service,
        service_by_fanout=by_fanout,
        service_gap_ns=service_gaps,
        service_by_fanout_gap_ns=by_fanout_gaps,
        overhead_ns=overhead,
        link_delay_ns=scaled(lambda r: r.link_delay_ns),
        link_gap_ns=pooled(lambda r: r.link_gap_ns),
        link_broker=pooled(lambda r: r.link_broker),
        link_sender=pooled(lambda r: r.link_sender),
        publish_delay_ns=scaled(lambda r: r.publish_delay_ns),
        publish_gap_ns=pooled(lambda r: r.publish_gap_ns),
        publish_broker=pooled(lambda r: r.publish_broker),
        deliver_delay_ns=scaled(lambda r: r.deliver_delay_ns),
        deliver_gap_ns=pooled(lambda r: r.deliver_gap_ns),
        deliver_subscriber=pooled(lambda r: r.deliver_subscriber),
        deliver_publisher=pooled(lambda r: r.deliver_publisher),
        client_cpu_per_event_s=target_mean(lambda r: r.client_cpu_per_event_s),
        busy_cores=busy_at_target,
        problems=[p for r in runs for p in r.problems],
    )


def _mean(samples: np.ndarray | Sequence[float]) -> float:
    return float(np.mean(samples)) if len(samples) else 0.0


# A run's figures of one broker (and fan-out), for carried() to bind with
# functools.partial: mypy checks a partial's arguments, and cannot type a lambda
# that binds the loop's broker as a default argument.


def _service(broker: str, run: Characterization) -> np.ndarray:
    return run.service_ns[broker]


def _service_gap(broker: str, run: Characterization) -> np.ndarray:
    return run.service_gap_ns[broker]


def _fanout_service(broker: str, fanout: int, run: Characterization) -> np.ndarray | tuple[()]:
    """The service samples at `fanout`; none when the run never saw that fan-out."""
    return run.service_by_fanout[broker].get(fanout, ())


def _fanout_service_gap(broker: str, fanout: int, run: Characterization) -> np.ndarray | tuple[()]:
    return run.service_by_fanout_gap_ns[broker].get(fanout, ())


def _overhead(broker: str, run: Characterization) -> float:
    return run.overhead_ns[broker]
