"""Discrete-event simulation of a broker network (the role SimQPN played in the thesis).

The model simulated is the one `monitor.model.network` describes:

* each station is a FIFO single server; an event's service work is drawn, with
  replacement, from the station's samples for the event's fan-out there (or
  from ``service_ns``);
* the stations of a host share its ``C = cores - background`` cores by
  processor sharing: with m stations of the host in service, each works at rate
  ``min(1, C / m)``. Implemented with a virtual clock per host (work done by any
  one busy station since the start), so that a change in m reschedules one
  completion, the host's next, not every busy station's. Hosts with at least
  as many cores as stations skip this (every station always runs at rate 1);
* publishers publish at their rate, Poisson (exponential gaps) or constant (a
  fixed period, the first publication at a uniformly drawn phase so that
  several constant publishers are not synchronised); each event draws its tree;
* an event joins the root's queue a publish delay after publication; after a
  station completes it, it joins each child's queue after a link delay (drawn
  per hop) and reaches each local subscriber a delivery delay after the
  completion, each drawn from the samples of that root, link or subscriber
  (`Network.publish_samples`, `link_samples`, `deliver_samples`). Latency =
  delivery time - publication time.

Statistics (batch means). Simulated time is cut into batches of equal length,
first the time of 1000 expected publications, doubled (merging neighbours)
whenever there are 60, so that there are always 30 to 59. The first
``warmup_fraction`` of the batches (at least that fraction of the simulated
time) is discarded as warm-up. A station's
figures are attributed to the batch in which its events complete: throughput
(completions / time), utilization (service work completed / time, in cores),
busy fraction (time in service / time) and mean response time (queueing plus
service). The latency of a (class, subscriber) pair is attributed to the batch
of the delivering station's completion; its percentiles come from all samples
after the warm-up. 95 % confidence intervals: Student t over the batch means,
assuming them independent and identically distributed (long batches; the
doubling makes batches longer as the run goes on).

Stopping. The run ends when every tracked mean (throughput, utilization and
response time of every station the offered load reaches; latency of every pair
that receives events) has a confidence half-width within ``precision`` times
its value (checked at batch boundaries once there are 30 batches), or at
``max_events`` processed kernel events, or after ``max_wall_s`` seconds of wall
time, whichever comes first. Figures come from complete batches only, except
for a run stopped by a limit before it had 30: it also uses the unfinished last
batch, so that short runs give numbers (with wide or no confidence intervals).
A saturated station's queue grows without bound: such a run ends at a limit,
and its figures describe that run, not a steady state.
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from monitor.model.network import Network
from monitor.model.operational import NS_PER_S, StationMetrics, analyze

_MIN_BATCHES = 30  # batches before the stopping rule is consulted; merged in pairs at twice that
_FIRST_BATCH_PUBLICATIONS = 1000  # expected publications in one batch at the start
_CHECK_EVERY = 4096  # kernel events between wall-clock checks
_CHUNK = 4096  # random numbers drawn at a time
_T975_SMALL_DF = (12.7062, 4.3027, 3.1824, 2.7764)  # Student t 0.975 quantiles, df 1..4

# Kinds of kernel events, in the order they are processed at equal times.
_DONE = 0  # x = station on a host without sharing
_DONE_SHARED = 1  # x = host, y = its schedule generation (stale entries are skipped)
_JOIN = 2  # x = station, y = tree offset, z = publication time: event joins a queue
_PUBLISH = 3  # x = class index

Draw = Callable[[], float]


def t975(df: int) -> float:
    """The 0.975 quantile of Student's t with `df` degrees of freedom.

    A table for df <= 4, the Cornish-Fisher expansion (Abramowitz & Stegun
    26.7.5) above: within 1e-3 of the exact value for every df.
    """
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    if df <= len(_T975_SMALL_DF):
        return _T975_SMALL_DF[df - 1]
    z = NormalDist().inv_cdf(0.975)
    v = float(df)
    return (
        z
        + (z**3 + z) / (4 * v)
        + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * v**2)
        + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * v**3)
        + (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / (92160 * v**4)
    )


@dataclass(frozen=True)
class SimStationMetrics(StationMetrics):
    """`StationMetrics` measured in the simulation, with 95 % CI half-widths."""

    throughput_ci: float
    utilization_ci: float
    response_ci_ns: float
    busy_ci: float


@dataclass(frozen=True)
class Percentiles:
    """Latency percentiles, nanoseconds."""

    p50: float
    p90: float
    p99: float


@dataclass(frozen=True)
class SimulationResult:
    """What `simulate` measured (after warm-up).

    The fields of `OperationalResult` (``stations``, ``latency_ns``,
    ``bottleneck`` = the station with the highest measured busy fraction,
    ``saturated_hosts`` = hosts whose offered CPU demand reaches their capacity)
    plus: 95 % CI half-widths (``latency_ci_ns``, and in `SimStationMetrics`),
    latency percentiles and samples per (class, subscriber), and the run:
    ``stop_reason`` ("precision", "max_events" or "max_wall_s"),
    ``max_relative_ci`` (the largest CI half-width / mean of the tracked means;
    nan if some could not be estimated), kernel ``events`` processed,
    ``publications``, ``simulated_ns``, ``warmup_ns`` (discarded),
    ``batches`` (used after warm-up) and ``wall_s``.
    """

    stations: dict[str, SimStationMetrics]
    latency_ns: dict[tuple[str, str], float]
    latency_ci_ns: dict[tuple[str, str], float]
    latency_percentiles_ns: dict[tuple[str, str], Percentiles]
    latency_samples_ns: dict[tuple[str, str], np.ndarray]
    bottleneck: str
    saturated_hosts: list[str]
    stop_reason: str
    max_relative_ci: float
    events: int
    publications: int
    simulated_ns: float
    warmup_ns: float
    batches: int
    wall_s: float

    @property
    def events_per_s(self) -> float:
        """Kernel events processed per second of wall time."""
        return self.events / self.wall_s if self.wall_s > 0 else math.nan


def _sampler(rng: np.random.Generator, samples: np.ndarray) -> Draw:
    """Draws with replacement from `samples` (a constant when they are all equal)."""
    if np.all(samples == samples[0]):
        return itertools.repeat(float(samples[0])).__next__

    def chunks():
        while True:
            yield from samples[rng.integers(0, samples.size, _CHUNK)].tolist()

    return chunks().__next__


_ZERO_DELAY: Draw = itertools.repeat(0.0).__next__


def _interarrivals(rng: np.random.Generator, mean_ns: float, poisson: bool) -> Draw:
    if not poisson:
        return itertools.repeat(mean_ns).__next__

    def chunks():
        while True:
            yield from rng.exponential(mean_ns, _CHUNK).tolist()

    return chunks().__next__


def _choices(rng: np.random.Generator, values: list[int], weights: list[float]) -> Draw:
    if len(values) == 1:
        return itertools.repeat(values[0]).__next__
    p = np.array(weights) / math.fsum(weights)

    def chunks():
        while True:
            yield from rng.choice(values, _CHUNK, p=p).tolist()

    return chunks().__next__


@dataclass
class _Batches:
    """Cumulative counters at batch boundaries; batch i lies between snapshots i and i+1."""

    times: list[float]
    station: list[np.ndarray]  # (4, stations): completions, response, work, busy time
    pair_count: list[np.ndarray]
    pair_sum: list[np.ndarray]

    def merge(self) -> None:
        """Halve the number of batches by joining neighbours."""
        for name in ("times", "station", "pair_count", "pair_sum"):
            setattr(self, name, getattr(self, name)[::2])


@dataclass(frozen=True)
class _Estimates:
    """Point estimates and CI half-widths over the batches kept after warm-up."""

    batches: int
    warmup_ns: float
    first_kept: int  # index of the first kept snapshot
    station_mean: np.ndarray  # (4, stations): throughput/s, utilization, busy, response
    station_ci: np.ndarray
    service: np.ndarray
    pair_mean: np.ndarray
    pair_ci: np.ndarray
    pair_complete: np.ndarray  # every kept batch has samples of the pair


def _estimate(b: _Batches, warmup_fraction: float) -> _Estimates:
    n_all = len(b.times) - 1
    first = max(0, min(math.ceil(warmup_fraction * n_all), n_all - 1))
    times = np.array(b.times[first:])
    dur = np.diff(times)
    station = np.diff(np.array(b.station[first:]), axis=0)  # (batches, 4, stations)
    count, resp, work, busy = (station[:, i, :] for i in range(4))
    pc = np.diff(np.array(b.pair_count[first:]), axis=0)
    ps = np.diff(np.array(b.pair_sum[first:]), axis=0)
    span = times[-1] - times[0]
    with np.errstate(invalid="ignore", divide="ignore"):
        per_batch = [
            count * NS_PER_S / dur[:, None],
            work / dur[:, None],
            busy / dur[:, None],
            resp / count,
        ]
        totals = [
            count.sum(0) * NS_PER_S / span,
            work.sum(0) / span,
            busy.sum(0) / span,
            resp.sum(0) / count.sum(0),
        ]
        service = work.sum(0) / count.sum(0)
        pair_mean = ps.sum(0) / pc.sum(0)
        pair_ci = _half_width(ps / pc)
    return _Estimates(
        batches=len(dur),
        warmup_ns=float(times[0]),
        first_kept=first,
        station_mean=np.array(totals),
        station_ci=np.array([_half_width(v) for v in per_batch]),
        service=service,
        pair_mean=pair_mean,
        pair_ci=pair_ci,
        pair_complete=np.all(pc > 0, axis=0),
    )


def _half_width(values: np.ndarray) -> np.ndarray:
    """95 % CI half-width of the mean of each column's batch values (nan ones left out)."""
    n = np.sum(~np.isnan(values), axis=0)
    out = np.full(values.shape[1], math.nan)
    enough = n >= 2
    if np.any(enough):
        v = values[:, enough]
        t = np.array([t975(int(k) - 1) for k in n[enough]])
        out[enough] = t * np.nanstd(v, axis=0, ddof=1) / np.sqrt(n[enough])
    return out


def _relative_ci(est: _Estimates, tracked_stations: np.ndarray, tracked_pairs: np.ndarray) -> float:
    """The largest CI half-width / |mean| over the tracked means (nan if one is unknown)."""
    means = np.concatenate(
        [est.station_mean[[0, 1, 3]][:, tracked_stations].ravel(), est.pair_mean[tracked_pairs]]
    )
    cis = np.concatenate(
        [est.station_ci[[0, 1, 3]][:, tracked_stations].ravel(), est.pair_ci[tracked_pairs]]
    )
    if not np.all(est.pair_complete[tracked_pairs]) or np.any(np.isnan(cis)):
        return math.nan
    with np.errstate(invalid="ignore", divide="ignore"):
        rel = np.where(cis == 0, 0.0, cis / np.abs(means))
    return float(rel.max()) if rel.size else 0.0


Hop = tuple[int, Draw | None]
"""(child station, its link delay's draw; None for no delay)."""
Node = tuple[tuple[Hop, ...], tuple[tuple[Callable[[float], None], Draw], ...], Draw]


@dataclass(frozen=True)
class _Compiled:
    """The network as flat lists for the kernel.

    Stations, hosts and (class, subscriber) pairs are numbered in the network's
    order. Each tree with positive probability owns a block of one slot per
    station, at its *offset*: ``nodes[offset + j]`` = (child stations with their
    link delay draws, the ``append`` of the latency samples of each pair delivered
    to with that subscriber's delivery delay draw, the service draw for the event's
    fan-out), None where the tree does not visit j.
    """

    names: list[str]
    host_of: list[int]
    capacity: list[float]
    shared: list[bool]  # the station's host has fewer cores than stations
    pairs: list[tuple[str, str]]
    samples: list[list[float]]  # latency samples per pair, in order of completion
    nodes: list[Node | None]
    roots: dict[int, Hop]  # tree offset -> (root station, its publish delay's draw)
    publishers: list[tuple[Draw, Draw]]  # (gaps between publications, tree offsets)
    first_publication: list[float]


def _compile(network: Network, stream: Callable[[], np.random.Generator]) -> _Compiled:
    names = [s.name for s in network.stations]
    index = {name: j for j, name in enumerate(names)}
    host_names = [h.name for h in network.hosts]
    host_of = [host_names.index(s.host) for s in network.stations]
    capacity = [h.capacity for h in network.hosts]
    shared = [capacity[h] < host_of.count(h) for h in host_of]
    pairs = network.pairs()
    pair_index = {pair: p for p, pair in enumerate(pairs)}
    samples: list[list[float]] = [[] for _ in pairs]
    service_draws: dict[tuple[int, int], Draw] = {}
    delay_draws: dict[tuple[str, ...], Draw | None] = {}

    def delay_draw(key: tuple[str, ...], samples: np.ndarray) -> Draw | None:
        """One draw per link, root or (class, subscriber); None for a constant 0."""
        if key not in delay_draws:
            zero = bool(np.all(samples == 0.0))
            delay_draws[key] = None if zero else _sampler(stream(), samples)
        return delay_draws[key]

    def deliver_draw(cls_name: str, subscriber: str) -> Draw:
        samples = network.deliver_samples(cls_name, subscriber)
        return delay_draw(("deliver", cls_name, subscriber), samples) or _ZERO_DELAY

    def service_draw(j: int, fanout: int) -> Draw:
        station = network.stations[j]
        key = (j, fanout if fanout in station.service_by_fanout else -1)
        if key not in service_draws:
            service_draws[key] = _sampler(stream(), station.service_samples(fanout))
        return service_draws[key]

    nodes: list[Node | None] = []
    roots: dict[int, Hop] = {}
    publishers: list[tuple[Draw, Draw]] = []
    first_publication: list[float] = []
    for cls in network.classes:
        offsets, weights = [], []
        for p, tree in cls.trees:
            if p <= 0:
                continue
            offset = len(nodes)
            nodes.extend([None] * len(names))
            for station in tree.stations:
                j = index[station]
                appends = tuple(
                    (
                        samples[pair_index[(cls.name, s)]].append,
                        deliver_draw(cls.name, s),
                    )
                    for s in tree.deliveries.get(station, ())
                )
                children = tuple(
                    (index[c], delay_draw(("link", station, c), network.link_samples(station, c)))
                    for c in tree.children.get(station, ())
                )
                nodes[offset + j] = (children, appends, service_draw(j, tree.fanout(station)))
            roots[offset] = (
                index[tree.root],
                delay_draw(("publish", tree.root), network.publish_samples(tree.root)),
            )
            offsets.append(offset)
            weights.append(p)
        if cls.rate_per_s > 0:
            mean_gap = NS_PER_S / cls.rate_per_s
            poisson = cls.arrival == "poisson"
            gaps = _interarrivals(stream(), mean_gap, poisson)
            publishers.append((gaps, _choices(stream(), offsets, weights)))
            first_publication.append(gaps() if poisson else float(stream().uniform(0, mean_gap)))
    return _Compiled(
        names=names,
        host_of=host_of,
        capacity=capacity,
        shared=shared,
        pairs=pairs,
        samples=samples,
        nodes=nodes,
        roots=roots,
        publishers=publishers,
        first_publication=first_publication,
    )


def simulate(
    network: Network,
    seed: int = 1,
    precision: float = 0.02,
    max_wall_s: float | None = None,
    max_events: int | None = None,
    warmup_fraction: float = 0.1,
) -> SimulationResult:
    """Simulate `network` until the tracked means are within `precision` (see module doc).

    `seed` fixes every random draw: the same network and seed give the same
    result, unless the wall-clock limit stops the run (then the length of the
    run depends on the machine's speed). At least one of `max_wall_s` and
    `max_events` must be given: a saturated network never meets the precision.
    """
    if not precision > 0:
        raise ValueError(f"precision must be positive, got {precision}")
    if max_wall_s is None and max_events is None:
        raise ValueError("give max_wall_s or max_events: a saturated network runs for ever")
    if max_wall_s is not None and not max_wall_s > 0:
        raise ValueError(f"max_wall_s must be positive, got {max_wall_s}")
    if max_events is not None and max_events < 1:
        raise ValueError(f"max_events must be a positive number of events, got {max_events}")
    if not 0 <= warmup_fraction < 1:
        raise ValueError(f"warmup_fraction must be in [0, 1), got {warmup_fraction}")
    offered = analyze(network)
    total_rate = math.fsum(c.rate_per_s for c in network.classes)
    if total_rate <= 0:
        raise ValueError("nothing to simulate: no class publishes at a positive rate")

    wall_start = time.perf_counter()
    seeds = np.random.SeedSequence(seed)

    def stream() -> np.random.Generator:
        """An independent generator; the n-th call gives the same one for the same seed."""
        return np.random.default_rng(seeds.spawn(1)[0])

    net = _compile(network, stream)
    names, pairs, samples, nodes, roots = net.names, net.pairs, net.samples, net.nodes, net.roots
    publishers, host_of, capacity, shared = net.publishers, net.host_of, net.capacity, net.shared
    n_st = len(names)

    # ---- state
    heap: list[tuple] = []
    push, pop = heapq.heappush, heapq.heappop
    busy = [False] * n_st
    queues: list[deque] = [deque() for _ in range(n_st)]
    current: list[tuple] = [()] * n_st  # (joined, tree offset, published, work, started)
    count = [0] * n_st
    resp = [0.0] * n_st
    work_done = [0.0] * n_st
    busy_time = [0.0] * n_st
    n_hosts = len(capacity)
    vclock = [0.0] * n_hosts  # work done by each busy station of the host since start ...
    vclock_at = [0.0] * n_hosts  # ... as of this time
    rate = [1.0] * n_hosts
    in_service = [0] * n_hosts
    finish: list[list[tuple[float, int]]] = [[] for _ in range(n_hosts)]  # (virtual end, j)
    generation = [0] * n_hosts

    def start(j: int, now: float, joined: float, offset: int, published: float) -> None:
        """Put an event into service at idle station j."""
        node = nodes[offset + j]
        # Events only reach stations of their own tree, whose nodes _compile filled in.
        assert node is not None
        work = node[2]()
        busy[j] = True
        current[j] = (joined, offset, published, work, now)
        if not shared[j]:
            push(heap, (now + work, _DONE, j, 0, 0.0))
            return
        h = host_of[j]
        v = vclock[h] + (now - vclock_at[h]) * rate[h]
        vclock[h] = v
        vclock_at[h] = now
        tags = finish[h]
        heapq.heappush(tags, (v + work, j))
        m = in_service[h] + 1
        in_service[h] = m
        r = capacity[h] / m
        if r > 1.0:
            r = 1.0
        if r != rate[h] or tags[0][1] == j:
            rate[h] = r
            generation[h] += 1
            push(heap, (now + (tags[0][0] - v) / r, _DONE_SHARED, h, generation[h], 0.0))

    def join(j: int, now: float, offset: int, published: float) -> None:
        """The event reaches station j's queue."""
        if busy[j]:
            queues[j].append((now, offset, published))
        else:
            start(j, now, now, offset, published)

    def complete(j: int, now: float) -> None:
        """Station j finished its event: record it, forward and deliver it."""
        joined, offset, published, work, started = current[j]
        count[j] += 1
        resp[j] += now - joined
        work_done[j] += work
        busy_time[j] += now - started
        children, appends, _ = nodes[offset + j]
        for child, link in children:
            if link is None:
                join(child, now, offset, published)
            else:
                push(heap, (now + link(), _JOIN, child, offset, published))
        for append, deliver in appends:
            append(now + deliver() - published)

    # ---- batches
    delta = _FIRST_BATCH_PUBLICATIONS * NS_PER_S / total_rate
    batches = _Batches([0.0], [np.zeros((4, n_st))], [np.zeros(len(pairs))], [np.zeros(len(pairs))])
    pair_totals = [0.0] * len(pairs)
    pair_seen = [0] * len(pairs)

    def snapshot(now: float) -> None:
        for p, values in enumerate(samples):
            pair_totals[p] += math.fsum(values[pair_seen[p] :])
            pair_seen[p] = len(values)
        batches.times.append(now)
        batches.station.append(np.array([count, resp, work_done, busy_time], dtype=np.float64))
        batches.pair_count.append(np.array(pair_seen, dtype=np.float64))
        batches.pair_sum.append(np.array(pair_totals))

    tracked_stations = np.array([offered.stations[n].throughput > 0 for n in names])
    class_rate = {c.name: c.rate_per_s for c in network.classes}
    tracked_pairs = np.array([class_rate[cls] > 0 for cls, _ in pairs], dtype=bool)

    # ---- the kernel
    for k, first in enumerate(net.first_publication):
        push(heap, (first, _PUBLISH, k, 0, 0.0))
    wall_limit = wall_start + max_wall_s if max_wall_s is not None else math.inf
    event_limit = max_events if max_events is not None else math.inf
    next_check = min(_CHECK_EVERY, event_limit)
    boundary = delta
    events = 0
    publications = 0
    stop_reason = ""
    now = 0.0
    while not stop_reason:
        now, kind, x, y, z = pop(heap)
        if now >= boundary:
            while now >= boundary:
                snapshot(boundary)
                if len(batches.times) > 2 * _MIN_BATCHES:
                    batches.merge()
                    delta *= 2
                boundary = len(batches.times) * delta
            if len(batches.times) > _MIN_BATCHES:
                est = _estimate(batches, warmup_fraction)
                if _relative_ci(est, tracked_stations, tracked_pairs) <= precision:
                    stop_reason = "precision"
                    break
        if kind == _DONE:
            complete(x, now)
            q = queues[x]
            if q:
                joined, offset, published = q.popleft()
                start(x, now, joined, offset, published)
            else:
                busy[x] = False
        elif kind == _DONE_SHARED:
            if y != generation[x]:
                continue
            tags = finish[x]
            v, j = heapq.heappop(tags)
            vclock[x] = v
            vclock_at[x] = now
            complete(j, now)
            q = queues[j]
            if q:
                joined, offset, published = q.popleft()
                work = nodes[offset + j][2]()
                current[j] = (joined, offset, published, work, now)
                heapq.heappush(tags, (v + work, j))
            else:
                busy[j] = False
                m = in_service[x] - 1
                in_service[x] = m
                if m:
                    r = capacity[x] / m
                    rate[x] = r if r < 1.0 else 1.0
            if tags:
                generation[x] += 1
                gap = (tags[0][0] - v) / rate[x]
                if gap < 0.0:  # rounding: the next tag is already reached
                    gap = 0.0
                push(heap, (now + gap, _DONE_SHARED, x, generation[x], 0.0))
        elif kind == _JOIN:
            join(x, now, y, z)
        else:
            gaps, trees = publishers[x]
            publications += 1
            push(heap, (now + gaps(), _PUBLISH, x, 0, 0.0))
            offset = trees()
            root, publish = roots[offset]
            if publish is None:
                join(root, now, offset, now)
            else:
                push(heap, (now + publish(), _JOIN, root, offset, now))
        events += 1
        if events >= next_check:
            if events >= event_limit:
                stop_reason = "max_events"
            elif time.perf_counter() >= wall_limit:
                stop_reason = "max_wall_s"
            next_check = min(events + _CHECK_EVERY, event_limit)

    if stop_reason == "precision":
        now = batches.times[-1]
    elif len(batches.times) <= _MIN_BATCHES and now > batches.times[-1]:
        snapshot(now)  # a short run: keep the unfinished batch
    est = _estimate(batches, warmup_fraction)
    stations = {
        name: SimStationMetrics(
            throughput=float(est.station_mean[0, j]),
            utilization=float(est.station_mean[1, j]),
            busy=float(est.station_mean[2, j]),
            response_ns=float(est.station_mean[3, j]),
            service_ns=float(est.service[j]),
            throughput_ci=float(est.station_ci[0, j]),
            utilization_ci=float(est.station_ci[1, j]),
            busy_ci=float(est.station_ci[2, j]),
            response_ci_ns=float(est.station_ci[3, j]),
        )
        for j, name in enumerate(names)
    }
    kept = {
        pair: np.array(
            samples[p][int(batches.pair_count[est.first_kept][p]) : int(batches.pair_count[-1][p])]
        )
        for p, pair in enumerate(pairs)
    }
    percentiles = {
        pair: Percentiles(*(float(q) for q in np.percentile(values, (50, 90, 99))))
        if values.size
        else Percentiles(math.nan, math.nan, math.nan)
        for pair, values in kept.items()
    }
    return SimulationResult(
        stations=stations,
        latency_ns={pair: float(est.pair_mean[p]) for p, pair in enumerate(pairs)},
        latency_ci_ns={pair: float(est.pair_ci[p]) for p, pair in enumerate(pairs)},
        latency_percentiles_ns=percentiles,
        latency_samples_ns=kept,
        bottleneck=max(stations, key=lambda n: np.nan_to_num(stations[n].busy)),
        saturated_hosts=offered.saturated_hosts,
        stop_reason=stop_reason,
        max_relative_ci=_relative_ci(est, tracked_stations, tracked_pairs),
        events=events,
        publications=publications,
        simulated_ns=now,
        warmup_ns=est.warmup_ns,
        batches=est.batches,
        wall_s=time.perf_counter() - wall_start,
    )
