"""Operational analysis of a broker network (thesis 4.1.4, eqs. 4.3-4.14).

Two methods:

``"mm1"`` (the thesis' model). Per class k and station j, the visit ratio
``V_jk = sum over trees t of p_t * [j in t]`` (the tree form of eq. 4.3); the
station's throughput ``X_j = sum_k lambda_k V_jk`` (eq. 4.1); its mean service
time ``S_j`` (the mean of the samples, or, with ``service_by_fanout``, the mean
over its visits weighted by the rate of each fan-out); its utilization
``U_j = X_j S_j`` (utilization law, eq. 4.5); its response time
``R_j = S_j / (1 - U_j)`` (M/M/1, eq. 4.4). Each station is assumed to have a
core of its own: hosts only enter through the saturation check (a host whose
stations' total demand ``sum U_j`` reaches ``cores - background`` is reported
saturated).

``"mm1-ps"`` (processor sharing of a host's cores). A station of a host with
``C = cores - background`` cores, while in service, progresses at rate
``min(1, C / m)`` when m stations of its host are in service. Its service is
stretched by the expected slowdown::

    f_j = E[ max(1, (1 + N_j) / C) ],   N_j = sum_{i != j on the host} B_ij,

the B_ij independent Bernoulli variables, B_ij = 1 when station i is in service
during (a random instant of) j's service::

    P(B_ij = 1) = 1 - (1 - rho_i) (1 - q_ij).

``rho_i = X_i S_i f_i`` is the fraction of time i is busy, standing for other
events (taken independent of j's). ``q_ij`` is the fraction of j's service
during which i serves *the same* event: a fork sends one event to several
stations of a host at once, and they then compete for its cores. Averaged over
the trees t visiting both, ``q_ij = sum_t lambda_t q_ij^t / X_j``; ``q_ij^t = 0``
when one of the two is an ancestor of the other in t (it has finished before
the other starts); otherwise, taking service times exponential with the
stretched means s_i, s_j of the event's fan-outs, and the difference
``d = (start of i's service) - (start of j's)`` normally distributed::

    q_ij^t = s_i / (s_i + s_j) * E[ exp(-d / s_j) [d >= 0] + exp(d / s_i) [d < 0] ]

(the chance that the one which started first is still in service when the
other starts, times the mean overlap of two exponential services, per unit of
j's service). The mean and variance of d add up along the two branches below
the stations' lowest common ancestor: per hop the link delay's mean and
variance; per station passed the M/M/1 sojourn, exponential with mean
``W_x + s_x``; at i and j their waiting, mean ``rho R`` and variance
``rho (2 - rho) R^2``. The slowdowns are the fixed point of these equations,
found by iteration from f = 1; then ``R_j = S_j f_j / (1 - rho_j)``.

Without forks (q = 0) and with fewer stations than cores it reduces to "mm1";
for exponential service times and n identical stations on one core without
forks its mean response time is exact (R = S / (1 - n U), the M/M/1 of the
pooled load; the busy fractions are not). Otherwise
it is an approximation: independence between stations except through the
same event, exponential service, normal timing differences, and the M/M/1
formula for stretched service. It ignores that stations fed by the same events
have correlated queues (busy at the same times with *earlier* events too), so
it underestimates when much of a host's load is forked to several of its
stations at once: for one publisher forking every event to 3 stations on 2
cores (30 % load each) it predicts a response time 19 % below the simulation's
(mm1: 30 % below). On the 15-broker case study shape (hierarchical routing,
partial forks, all brokers on 2 cores) its response times were 6-9 % low and
its latencies within 9 % of the simulation's (mm1: 27-39 % low). Use
`monitor.model.simulation.simulate` where that matters.

Path latency (eqs. 4.13/4.14 with measured paths and delays). The mean time an
event spends at station j is its waiting ``W_j = R_j - S_j f_j`` (the same for
every event in a FIFO queue) plus its own stretched service ``f_j s_j(fan-out)``
(equal to ``R_j`` on average, and exactly ``R_j`` without fan-out samples). The
latency of (class k, subscriber s) is the mean, weighted by tree probability,
over the trees of k that deliver to s, of::

    publish delay + sum over the path's stations of (W_j + f_j s_j) +
    (stations on the path - 1) * link delay + deliver delay

(mean delays). Unlike eq. 4.14 the paths are weighted by how often they are
used, and client-side delays are included, so the figure compares with the
measured publish-to-delivery latency. A saturated station (busy fraction >= 1)
has an infinite response time, and so has every path through it.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Literal

import numpy as np

from monitor.model.network import Network

Method = Literal["mm1", "mm1-ps"]
METHODS: tuple[str, ...] = ("mm1", "mm1-ps")
NS_PER_S = 1e9
_PS_TOLERANCE = 1e-10
_PS_MAX_ITERATIONS = 1000


@dataclass(frozen=True)
class StationMetrics:
    """Steady-state figures of one station (broker).

    ``throughput``: events handled per second. ``utilization``: CPU demand
    ``X S``, in cores (the fraction of one core doing this station's work).
    ``response_ns``: mean time from joining the queue to completion.
    ``service_ns``: mean CPU service demand per event (not stretched by
    sharing). ``busy``: fraction of time an event is in service (equal to the
    utilization unless the station shares cores and is slowed down).
    """

    throughput: float
    utilization: float
    response_ns: float
    service_ns: float
    busy: float

    @property
    def slowdown(self) -> float:
        """Mean stretch of service by processor sharing: busy / utilization (1 if idle)."""
        return self.busy / self.utilization if self.utilization > 0 else 1.0


@dataclass(frozen=True)
class HostMetrics:
    """CPU demand on one host: ``demand`` = sum of its stations' utilizations (cores)."""

    demand: float
    capacity: float

    @property
    def saturated(self) -> bool:
        """Demand reaches the cores available (``cores - background``)."""
        return self.demand >= self.capacity


@dataclass(frozen=True)
class OperationalResult:
    """Predictions of `analyze`.

    ``stations``: per station name. ``latency_ns``: mean publish-to-delivery
    latency per (class, subscriber). ``bottleneck``: the station with the
    highest busy fraction. ``saturated_hosts``: hosts whose demand reaches their
    capacity. ``visit_ratios``: V per (class, station), for stations the class
    visits.
    """

    method: str
    stations: dict[str, StationMetrics]
    latency_ns: dict[tuple[str, str], float]
    bottleneck: str
    saturated_hosts: list[str]
    hosts: dict[str, HostMetrics]
    visit_ratios: dict[tuple[str, str], float]


def visit_ratios(network: Network) -> dict[tuple[str, str], float]:
    """Expected visits per event of each class to each station it can reach.

    ``V_jk = sum over the class's trees t of p_t * [j in t]`` (eq. 4.3 in tree
    form: a tree visits a station at most once).
    """
    ratios: dict[tuple[str, str], float] = defaultdict(float)
    for cls in network.classes:
        for p, tree in cls.trees:
            for station in tree.stations:
                ratios[(cls.name, station)] += p
    return dict(ratios)


def _fanout_rates(network: Network) -> dict[str, dict[int, float]]:
    """station -> fan-out -> visits per second with that fan-out."""
    rates: dict[str, dict[int, float]] = {s.name: defaultdict(float) for s in network.stations}
    for cls in network.classes:
        for p, tree in cls.trees:
            for station in tree.stations:
                rates[station][tree.fanout(station)] += cls.rate_per_s * p
    return rates


def _erfc_scaled(z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(t, e) with erfc(z) = t * exp(-z**2 + e) for z >= 0.

    Numerical Recipes' ``erfcc`` (relative error < 1.2e-7), in parts so that
    callers can fold exp(-z**2) into other exponents without overflow.
    """
    t = 1.0 / (1.0 + 0.5 * z)
    # Horner's rule; its first step is written out so that poly is an array throughout.
    poly = -0.82215223 + t * 0.17087277
    for c in (1.48851587, -1.13520398, 0.27886807, -0.18628806, 0.09678418):
        poly = c + t * poly
    for c in (0.37409196, 1.00002368, -1.26551223):
        poly = c + t * poly
    return t, poly


def _exp_tail(mean: np.ndarray, var: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """E[exp(-d / scale) [d >= 0]] for d ~ Normal(mean, var); var 0 gives the point mass."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        sigma = np.sqrt(var)
        x = mean / sigma - sigma / scale
        t, poly = _erfc_scaled(np.abs(x) / math.sqrt(2.0))
        # x >= 0: exp(-m/a + v/2a^2) * (1 - erfc(x/sqrt2)/2); the exponent is <= 0 there.
        upper = np.exp(-mean / scale + var / (2 * scale**2)) * (
            1.0 - 0.5 * t * np.exp(-(x**2) / 2 + poly)
        )
        # x < 0: the same with Phi(x) = erfc(-x/sqrt2)/2, exponents folded together.
        lower = 0.5 * t * np.exp(-(mean**2) / (2 * var) + poly)
        normal = np.where(x >= 0, upper, lower)
        point = np.where(mean >= 0, np.exp(-mean / scale), 0.0)
    return np.where(sigma > 0, normal, point)


class _SharedCpu:
    """The processor-sharing slowdowns of "mm1-ps" (see the module doc).

    Built once per analysis: every visit of a tree with load (a node: tree,
    station) in breadth-first order with its parent, and every ordered pair of
    nodes of one tree on the same shared host, neither an ancestor of the other,
    with their lowest common ancestor.
    """

    def __init__(
        self,
        network: Network,
        mean_service: dict[str, dict[int, float]],
        service: np.ndarray,
        utilization: np.ndarray,
        throughput: np.ndarray,
    ) -> None:
        self.service = service
        self.utilization = utilization
        self.throughput = throughput
        index = {s.name: j for j, s in enumerate(network.stations)}
        capacity = {h.name: h.capacity for h in network.hosts}
        hosts = [s.host for s in network.stations]
        self.groups = [
            (capacity[h], np.array([j for j, hj in enumerate(hosts) if hj == h]))
            for h in dict.fromkeys(hosts)
            if capacity[h] < hosts.count(h)
        ]
        shared = {s.name for s in network.stations if capacity[s.host] < hosts.count(s.host)}
        station: list[int] = []
        node_service: list[float] = []
        parent: list[int] = []
        depth: list[int] = []
        rate: list[float] = []
        # of the link into each node (0 at the root)
        link_mean: list[float] = []
        link_var: list[float] = []
        pairs: list[tuple[int, int, int]] = []
        for cls in network.classes:
            for p, tree in cls.trees:
                if p <= 0 or cls.rate_per_s <= 0:
                    continue
                node = {}
                paths = {name: tree.path_to(name) for name in tree.stations}
                for name in tree.stations:
                    node[name] = len(station)
                    station.append(index[name])
                    node_service.append(mean_service[name][tree.fanout(name)])
                    path = paths[name]
                    parent.append(node[path[-2]] if len(path) > 1 else node[name])
                    link = network.link_samples(path[-2], name) if len(path) > 1 else np.zeros(1)
                    link_mean.append(float(link.mean()))
                    link_var.append(float(link.var()))
                    depth.append(len(path) - 1)
                    rate.append(cls.rate_per_s * p)
                for a, b in itertools.permutations(tree.stations, 2):
                    if a in shared and hosts[index[a]] == hosts[index[b]]:
                        pa, pb = paths[a], paths[b]
                        if a in pb or b in pa:
                            continue
                        common = [x for x, y in zip(pa, pb, strict=False) if x == y]
                        pairs.append((node[a], node[b], node[common[-1]]))
        self.station = np.array(station, dtype=np.int64)
        self.node_service = np.array(node_service)
        self.parent = np.array(parent, dtype=np.int64)
        self.levels = [
            np.flatnonzero(np.array(depth) == d) for d in range(1, max(depth, default=0) + 1)
        ]
        self.rate = np.array(rate)
        self.link_mean = np.array(link_mean)
        self.link_var = np.array(link_var)
        self.pairs = np.array(pairs, dtype=np.int64).reshape(-1, 3)

    def step(self, slowdown: np.ndarray) -> np.ndarray:
        """One iteration of the fixed point: the slowdowns implied by `slowdown`."""
        rho = np.minimum(self.utilization * slowdown, 1.0)
        stretched = self.service * slowdown
        with np.errstate(divide="ignore", invalid="ignore"):
            response = np.where(rho < 1.0, stretched / (1.0 - rho), math.inf)
        waiting = response - stretched
        st = self.station
        s = slowdown[st] * self.node_service
        sojourn = waiting[st] + s
        arrive_mean = np.zeros(st.size)
        arrive_var = np.zeros(st.size)
        for level in self.levels:
            up = self.parent[level]
            arrive_mean[level] = arrive_mean[up] + sojourn[up] + self.link_mean[level]
            arrive_var[level] = arrive_var[up] + sojourn[up] ** 2 + self.link_var[level]
        start_mean = arrive_mean + waiting[st]
        start_var = arrive_var + (rho * (2.0 - rho) * response**2)[st]
        done_var = arrive_var + sojourn**2
        a, b, common = self.pairs.T  # q: the share of b's service overlapped by a's
        with np.errstate(divide="ignore", invalid="ignore"):
            d_mean = start_mean[a] - start_mean[b]
            d_var = np.maximum(start_var[a] + start_var[b] - 2.0 * done_var[common], 0.0)
            q = (s[a] / (s[a] + s[b])) * (
                _exp_tail(d_mean, d_var, s[b]) + _exp_tail(-d_mean, d_var, s[a])
            )
        q = np.where(np.isfinite(q), q, 0.0)  # saturated or zero-work stations
        n = slowdown.size
        overlap = np.zeros((n, n))
        np.add.at(overlap, (st[a], st[b]), self.rate[b] * q)
        with np.errstate(divide="ignore", invalid="ignore"):
            overlap = np.where(self.throughput > 0, overlap / self.throughput, 0.0)
        busy_with = 1.0 - (1.0 - rho[:, None]) * (1.0 - np.minimum(overlap, 1.0))
        result = np.ones(n)
        for cap, members in self.groups:
            stretch = np.maximum(1.0, (1.0 + np.arange(members.size)) / cap)
            for j in members:
                others = np.ones(1)
                for i in members:
                    if i != j:
                        others = np.convolve(others, (1.0 - busy_with[i, j], busy_with[i, j]))
                result[j] = float(others @ stretch[: others.size])
        return result

    def solve(self) -> np.ndarray:
        """The slowdowns: iterated from 1 until they change by less than 1e-10."""
        slowdown = np.ones(self.service.size)
        for _ in range(_PS_MAX_ITERATIONS):
            new = self.step(slowdown)
            done = float(np.max(np.abs(new - slowdown), initial=0.0)) < _PS_TOLERANCE
            slowdown = new
            if done:
                break
        return slowdown


def analyze(network: Network, method: Method = "mm1") -> OperationalResult:
    """Throughput, utilization, response time and latency predictions (see module doc)."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    names = [s.name for s in network.stations]
    fanout_rates = _fanout_rates(network)
    mean_service = {
        s.name: {f: float(s.service_samples(f).mean()) for f in fanout_rates[s.name]}
        for s in network.stations
    }
    throughput = np.array([math.fsum(fanout_rates[n].values()) for n in names])
    service = np.array(
        [
            math.fsum(r * mean_service[n][f] for f, r in fanout_rates[n].items()) / x
            if x > 0
            else float(s.service_ns.mean())
            for n, s, x in zip(names, network.stations, throughput, strict=True)
        ]
    )
    utilization = throughput * service / NS_PER_S
    if method == "mm1-ps":
        slowdown = _SharedCpu(network, mean_service, service, utilization, throughput).solve()
    else:
        slowdown = np.ones(len(names))
    busy = np.minimum(utilization * slowdown, 1.0)
    stretched = service * slowdown
    with np.errstate(divide="ignore"):
        response = np.where(busy < 1.0, stretched / (1.0 - busy), math.inf)
    waiting = dict(zip(names, (response - stretched).tolist(), strict=True))
    slow = dict(zip(names, slowdown.tolist(), strict=True))
    stations = {
        n: StationMetrics(
            throughput=float(throughput[j]),
            utilization=float(utilization[j]),
            response_ns=float(response[j]),
            service_ns=float(service[j]),
            busy=float(busy[j]),
        )
        for j, n in enumerate(names)
    }
    hosts = {
        h.name: HostMetrics(
            demand=math.fsum(
                float(utilization[j]) for j, s in enumerate(network.stations) if s.host == h.name
            ),
            capacity=h.capacity,
        )
        for h in network.hosts
    }

    weighted: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    for cls in network.classes:
        for p, tree in cls.trees:
            if p <= 0:
                continue
            for subscriber, path in tree.delivery_paths().items():
                at_stations = math.fsum(
                    waiting[j] + slow[j] * mean_service[j][tree.fanout(j)] for j in path
                )
                links = (network.link_samples(a, b).mean() for a, b in itertools.pairwise(path))
                delays = (
                    network.publish_samples(path[0]).mean()
                    + math.fsum(links)
                    + network.deliver_samples(cls.name, subscriber).mean()
                )
                weighted[(cls.name, subscriber)].append((p, float(delays) + at_stations))
    latency = {
        pair: math.fsum(p * value for p, value in items) / math.fsum(p for p, _ in items)
        for pair, items in weighted.items()
    }
    return OperationalResult(
        method=method,
        stations=stations,
        latency_ns=latency,
        bottleneck=max(stations, key=lambda n: stations[n].busy),
        saturated_hosts=[name for name, h in hosts.items() if h.saturated],
        hosts=hosts,
        visit_ratios=visit_ratios(network),
    )
