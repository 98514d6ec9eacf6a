"""The input of the performance model: brokers, hosts, publishers and their trees.

Everything here is a description of *what to model*; it holds measured samples
(service times, delays) but computes nothing beyond validation. Units: times are
nanoseconds, rates are events per second.

Modelling assumptions the description encodes (thesis 4.1, 4.3.1):

* A broker (`Station`) is a single-threaded FIFO server. Its per-event CPU
  service time is a random draw, with replacement, from the measured samples;
  draws are independent of each other and of the arrival process.
* Brokers run on hosts (`Host`). The stations of one host share its cores by
  processor sharing: with m stations of the host in service at once, each
  progresses at rate ``min(1, (cores - background) / m)``. ``background`` is CPU
  constantly taken by other processes (e.g. the client processes). Memory, disk
  and the network interface are not modelled.
* A publisher (`EventClass`) emits events at a constant mean rate. Each event
  follows one dissemination `Tree`, drawn independently with the given
  probabilities: the thesis' per-link routing probabilities (eq. 4.17/4.18)
  replaced by the joint distribution of whole trees, so that correlated
  forwarding decisions are kept.
* Network links and client-side processing are pure delays (infinite servers):
  no queueing, drawn independently per event and hop, from the samples of that
  link, root or (class, subscriber) pair where the network has them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, cast

import numpy as np

Arrival = Literal["poisson", "constant"]
ARRIVALS: tuple[str, ...] = ("poisson", "constant")
PROBABILITY_TOLERANCE = 1e-6


def as_samples(values: np.ndarray | Sequence[float] | float, what: str) -> np.ndarray:
    """Non-empty, finite, non-negative float64 samples (a number is one sample).

    Raises ValueError naming ``what`` when the samples are unusable.
    """
    array = np.array(values, dtype=np.float64).reshape(-1)
    if array.size == 0:
        raise ValueError(f"{what}: no samples")
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{what}: samples must be finite")
    if np.any(array < 0):
        raise ValueError(f"{what}: samples must be non-negative, got min {array.min()}")
    array.setflags(write=False)
    return array


@dataclass(frozen=True, eq=False)
class Station:
    """A broker: a single-threaded FIFO server on `host`.

    ``service_ns``: measured CPU service times per event (the empirical
    distribution sampled from). ``service_by_fanout``: optional samples keyed by
    the event's fan-out at this station (the number of destinations it is sent
    to here: child brokers plus local subscribers, as in the hops trace's
    ``to_nodes`` and ``delivered_to``); used for an event whose fan-out has
    samples, ``service_ns`` otherwise.
    """

    name: str
    host: str
    service_ns: np.ndarray
    service_by_fanout: Mapping[int, np.ndarray] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "service_ns", as_samples(self.service_ns, f"station {self.name!r} service_ns")
        )
        by_fanout: dict[int, np.ndarray] = {}
        for fanout, samples in self.service_by_fanout.items():
            if not isinstance(fanout, int | np.integer) or fanout < 0:
                raise ValueError(
                    f"station {self.name!r}: service_by_fanout keys must be fan-outs >= 0, "
                    f"got {fanout!r}"
                )
            by_fanout[int(fanout)] = as_samples(
                samples, f"station {self.name!r} service_by_fanout[{fanout}]"
            )
        object.__setattr__(self, "service_by_fanout", by_fanout)

    def service_samples(self, fanout: int) -> np.ndarray:
        """The samples that apply to an event of this fan-out."""
        return self.service_by_fanout.get(fanout, self.service_ns)


@dataclass(frozen=True)
class Host:
    """A machine with `cores` CPU cores, `background` of them busy with other work."""

    name: str
    cores: float
    background: float = 0.0

    def __post_init__(self) -> None:
        if not math.isfinite(self.cores) or self.cores <= 0:
            raise ValueError(f"host {self.name!r}: cores must be positive, got {self.cores}")
        if not math.isfinite(self.background) or not 0 <= self.background < self.cores:
            raise ValueError(
                f"host {self.name!r}: background must be in [0, cores={self.cores}), "
                f"got {self.background}"
            )

    @property
    def capacity(self) -> float:
        """Cores available to the stations: ``cores - background``."""
        return self.cores - self.background


@dataclass(frozen=True)
class Tree:
    """One dissemination tree: the stations an event visits and where it is delivered.

    ``root``: the station the publisher publishes to. ``children``: station ->
    stations it forwards the event to (a station without an entry forwards
    nowhere). ``deliveries``: station -> subscribers it delivers the event to
    (subscribers are sinks, not stations). Every station is visited at most
    once and every key must be reachable from the root (checked here; whether
    the names are stations of the network is checked by `Network`).
    """

    root: str
    children: Mapping[str, Sequence[str]] = field(default_factory=dict)
    deliveries: Mapping[str, Sequence[str]] = field(default_factory=dict)
    #: The stations visited, root first, breadth first (derived).
    stations: tuple[str, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        children = {s: tuple(c) for s, c in self.children.items()}
        deliveries = {s: tuple(d) for s, d in self.deliveries.items()}
        object.__setattr__(self, "children", children)
        object.__setattr__(self, "deliveries", deliveries)
        seen = {self.root}
        order = [self.root]
        for station in order:  # breadth first; `order` grows while iterating
            for child in children.get(station, ()):
                if child in seen:
                    raise ValueError(
                        f"tree rooted at {self.root!r}: station {child!r} is reached twice "
                        "(a dissemination tree visits each station at most once)"
                    )
                seen.add(child)
                order.append(child)
        for what, mapping in (("children", children), ("deliveries", deliveries)):
            unreachable = sorted(set(mapping) - seen)
            if unreachable:
                raise ValueError(
                    f"tree rooted at {self.root!r}: {what} of stations not reachable "
                    f"from the root: {unreachable}"
                )
        subscribers = [s for subs in deliveries.values() for s in subs]
        repeated = sorted({s for s in subscribers if subscribers.count(s) > 1})
        if repeated:
            raise ValueError(
                f"tree rooted at {self.root!r}: subscribers delivered more than once: {repeated}"
            )
        object.__setattr__(self, "stations", tuple(order))

    def fanout(self, station: str) -> int:
        """Destinations the event is sent to at `station`: child stations plus subscribers."""
        return len(self.children.get(station, ())) + len(self.deliveries.get(station, ()))

    def path_to(self, station: str) -> tuple[str, ...]:
        """The stations from the root to `station`, both included."""
        parent = {c: s for s, cs in self.children.items() for c in cs}
        path = [station]
        while path[-1] != self.root:
            path.append(parent[path[-1]])
        return tuple(reversed(path))

    def delivery_paths(self) -> dict[str, tuple[str, ...]]:
        """subscriber -> the delivery path (thesis Def. 6) ending at its station."""
        return {
            subscriber: self.path_to(station)
            for station, subscribers in self.deliveries.items()
            for subscriber in subscribers
        }


@dataclass(frozen=True)
class EventClass:
    """A publisher: events at `rate_per_s`, each following one of `trees`.

    ``arrival``: "poisson" (exponential inter-arrival times) or "constant"
    (a fixed period ``1 / rate_per_s``). ``trees``: (probability, tree) pairs;
    the probabilities must sum to 1 (within 1e-6).
    """

    name: str
    rate_per_s: float
    arrival: Arrival
    trees: Sequence[tuple[float, Tree]]

    def __post_init__(self) -> None:
        object.__setattr__(self, "trees", tuple((float(p), t) for p, t in self.trees))
        if not math.isfinite(self.rate_per_s) or self.rate_per_s < 0:
            raise ValueError(
                f"class {self.name!r}: rate_per_s must be finite and >= 0, got {self.rate_per_s}"
            )
        if self.arrival not in ARRIVALS:
            raise ValueError(
                f"class {self.name!r}: arrival must be one of {ARRIVALS}, got {self.arrival!r}"
            )
        if not self.trees:
            raise ValueError(f"class {self.name!r}: no dissemination trees")
        probabilities = [p for p, _ in self.trees]
        if any(not math.isfinite(p) or p < 0 for p in probabilities):
            raise ValueError(
                f"class {self.name!r}: tree probabilities must be >= 0, got {probabilities}"
            )
        total = math.fsum(probabilities)
        if abs(total - 1.0) > PROBABILITY_TOLERANCE:
            raise ValueError(
                f"class {self.name!r}: tree probabilities sum to {total:.9g}, not 1 "
                f"(tolerance {PROBABILITY_TOLERANCE})"
            )


@dataclass(frozen=True, eq=False)
class Network:
    """What to model: stations on hosts, publishers, and the pure delays.

    ``link_delay_ns``: added on every broker-to-broker forward. ``publish_delay_ns``:
    between the publication and the event joining the root station's queue.
    ``deliver_delay_ns``: between the delivering station's completion and the
    subscriber receiving it. Each is a number (a constant) or samples drawn
    with replacement; default 0.

    ``link_delays_ns`` (by (from, to) station), ``publish_delays_ns`` (by root
    station) and ``deliver_delays_ns`` (by (class, subscriber), else by subscriber)
    replace those pooled delays where they name a link, root or subscriber: a link's
    mean delay is a property of that link, the same in every run, and a subscriber
    receives the events published in its own client process later after the last
    broker than others (the process is still busy with the publication); pooled
    samples would spread both over every path alike (docs/accuracy.md).
    """

    stations: Sequence[Station]
    hosts: Sequence[Host]
    classes: Sequence[EventClass]
    link_delay_ns: np.ndarray | float = 0.0
    publish_delay_ns: np.ndarray | float = 0.0
    deliver_delay_ns: np.ndarray | float = 0.0
    link_delays_ns: Mapping[tuple[str, str], np.ndarray | float] = field(default_factory=dict)
    publish_delays_ns: Mapping[str, np.ndarray | float] = field(default_factory=dict)
    deliver_delays_ns: Mapping[str | tuple[str, str], np.ndarray | float] = field(
        default_factory=dict
    )

    def __post_init__(self) -> None:
        for name in ("stations", "hosts", "classes"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        for name in ("link_delay_ns", "publish_delay_ns", "deliver_delay_ns"):
            object.__setattr__(self, name, as_samples(getattr(self, name), name))
        for name in ("link_delays_ns", "publish_delays_ns", "deliver_delays_ns"):
            keyed = {k: as_samples(v, f"{name}[{k!r}]") for k, v in getattr(self, name).items()}
            object.__setattr__(self, name, keyed)
        for what, items in (
            ("station", self.stations),
            ("host", self.hosts),
            ("class", self.classes),
        ):
            names = [item.name for item in items]
            repeated = sorted({n for n in names if names.count(n) > 1})
            if repeated:
                raise ValueError(f"duplicate {what} names: {repeated}")
        if not self.stations:
            raise ValueError("a network needs at least one station")
        hosts = {h.name for h in self.hosts}
        for station in self.stations:
            if station.host not in hosts:
                raise ValueError(
                    f"station {station.name!r}: unknown host {station.host!r} "
                    f"(hosts: {sorted(hosts)})"
                )
        stations = {s.name for s in self.stations}
        for cls in self.classes:
            for _, tree in cls.trees:
                unknown = sorted(set(tree.stations) - stations)
                if unknown:
                    raise ValueError(
                        f"class {cls.name!r}: tree rooted at {tree.root!r} names unknown "
                        f"stations {unknown}"
                    )

    # The delay fields accept a number or samples, and __post_init__ has made each an
    # array (`as_samples`): hence the casts below.

    def link_samples(self, parent: str, child: str) -> np.ndarray:
        """The delay samples of the link from station `parent` to `child`."""
        return cast(np.ndarray, self.link_delays_ns.get((parent, child), self.link_delay_ns))

    def publish_samples(self, root: str) -> np.ndarray:
        """The delay samples from a publication to the root station `root`."""
        return cast(np.ndarray, self.publish_delays_ns.get(root, self.publish_delay_ns))

    def deliver_samples(self, cls: str, subscriber: str) -> np.ndarray:
        """The delay samples from the delivering station to `subscriber`, for events
        of class `cls`."""
        pooled = self.deliver_delays_ns.get(subscriber, self.deliver_delay_ns)
        return cast(np.ndarray, self.deliver_delays_ns.get((cls, subscriber), pooled))

    def station(self, name: str) -> Station:
        """The station called `name`."""
        for station in self.stations:
            if station.name == name:
                return station
        raise KeyError(name)

    def host(self, name: str) -> Host:
        """The host called `name`."""
        for host in self.hosts:
            if host.name == name:
                return host
        raise KeyError(name)

    def pairs(self) -> list[tuple[str, str]]:
        """(class, subscriber) pairs that receive events, in a stable order."""
        pairs: dict[tuple[str, str], None] = {}
        for cls in self.classes:
            for p, tree in cls.trees:
                if p > 0:
                    for subscriber in tree.delivery_paths():
                        pairs[(cls.name, subscriber)] = None
        return list(pairs)
