"""The data model of topology and case-study files (docs/design.md, "Topology files").

Everything here is plain frozen data; `topologies.loader` builds it from TOML and
checks it, so the methods below assume a valid tree.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Literal

Scalar = str | int | float | bool

Routing = Literal["hierarchical", "acyclic", "flooding"]
Arrival = Literal["poisson", "constant"]

ROUTINGS: tuple[Routing, ...] = ("hierarchical", "acyclic", "flooding")
ARRIVALS: tuple[Arrival, ...] = ("poisson", "constant")


class TopologyError(ValueError):
    """A topology or case-study file (or a lookup in one) is invalid.

    `str(error)` is one line, ``FILE: FIELD: PROBLEM``, where FIELD is a path into the
    file such as ``brokers[3].parent`` (array indexes count from 0).
    """

    def __init__(self, file: str, field: str | None, problem: str) -> None:
        self.file = file
        self.field = field
        self.problem = problem
        where = f"{file}: {field}" if field else file
        super().__init__(f"{where}: {problem}")


@dataclass(frozen=True)
class BrokerSpec:
    """One broker; `host` and `port` are already resolved from the file's defaults."""

    id: int
    parent: int | None
    host: str
    port: int


@dataclass(frozen=True)
class TlsFiles:
    """Certificate files for TLS on every link (PEM; paths already resolved)."""

    ca: Path
    """The CA that signed the brokers' certificates; peers are verified against it."""
    cert: Path
    """This broker's certificate (each host may hold its own file at this path)."""
    key: Path
    verify_clients: bool = False
    """Require clients to present a certificate signed by `ca` too."""


@dataclass(frozen=True)
class Security:
    """How the brokers of a topology authenticate peers; the files hold the secrets,
    the topology only names them."""

    secret_file: Path | None = None
    """The network secret: brokers present it to their parent and require it from
    their children, and from clients unless `client_secret_file` is set."""
    client_secret_file: Path | None = None
    """The secret clients must present, if it differs from the network secret."""
    tls: TlsFiles | None = None


@dataclass(frozen=True)
class Topology:
    """A tree of brokers. `source` (the file it came from) is not part of equality."""

    name: str
    host: str
    base_port: int
    routing: Routing = "hierarchical"
    brokers: dict[int, BrokerSpec] = field(default_factory=dict)
    source: str = field(default="", compare=False)
    security: Security = field(default_factory=Security)

    @cached_property
    def _children(self) -> dict[int, list[int]]:
        children: dict[int, list[int]] = {broker_id: [] for broker_id in self.brokers}
        for broker in self.brokers.values():
            if broker.parent is not None:
                children[broker.parent].append(broker.id)
        return {broker_id: sorted(ids) for broker_id, ids in children.items()}

    def root(self) -> int:
        """The id of the only broker without a parent."""
        return next(b.id for b in self.brokers.values() if b.parent is None)

    def children(self, broker_id: int) -> list[int]:
        """Ids of the broker's children, sorted."""
        return list(self._children[broker_id])

    def neighbours(self, broker_id: int) -> list[int]:
        """Ids of the brokers linked to this one (parent and children), sorted."""
        parent = self.brokers[broker_id].parent
        linked = self.children(broker_id) + ([] if parent is None else [parent])
        return sorted(linked)

    def ancestors(self, broker_id: int) -> list[int]:
        """The broker itself, then its parent, and so on up to the root."""
        path = [broker_id]
        while (parent := self.brokers[path[-1]].parent) is not None:
            path.append(parent)
        return path

    def tree_path(self, a: int, b: int) -> list[int]:
        """Broker ids along the tree from `a` to `b`, both included."""
        up = self.ancestors(a)
        down = self.ancestors(b)
        on_up = set(up)
        meet = next(i for i, broker_id in enumerate(down) if broker_id in on_up)
        return up[: up.index(down[meet]) + 1] + down[:meet][::-1]

    def address(self, broker_id: int) -> tuple[str, int]:
        broker = self.brokers[broker_id]
        return broker.host, broker.port


@dataclass(frozen=True)
class Workload:
    """How a replay drives the case study; `family` is drawn uniformly from 1..families."""

    event_type: str = "callForOffers"
    families: int = 40
    duration_s: float = 60.0
    warmup_s: float = 5.0
    drain_s: float = 2.0
    seed: int = 1


@dataclass(frozen=True)
class EventSpec:
    """One kind of event in a publisher's mix (a ``[[publishers.events]]`` entry).

    Each event the publisher emits is of this kind with probability `weight` over the
    sum of its kinds' weights. The event gets ``type``, the fixed `attributes`, for each
    name in `choose` one of its values (uniformly), for each name in `ranges` a number
    drawn uniformly from ``[lo, hi]`` (an integer if both bounds are integers, else a
    float rounded to two decimals), and ``size_kb`` drawn from `sizes_kb` with
    `size_weights`, plus an opaque ``payload`` of that many kilobytes.
    """

    type: str
    weight: float
    attributes: dict[str, Scalar] = field(default_factory=dict)
    choose: dict[str, tuple[Scalar, ...]] = field(default_factory=dict)
    ranges: dict[str, tuple[int | float, int | float]] = field(default_factory=dict)
    sizes_kb: tuple[float, ...] = (1.35, 7.06, 36.52)
    size_weights: tuple[float, ...] = (0.95, 0.04, 0.01)
    """Defaults: SPECjms2007's callForOffers sizes (Sachs et al., "Performance
    evaluation of message-oriented middleware using the SPECjms2007 benchmark", Table 5)."""


@dataclass(frozen=True)
class PublisherSpec:
    id: int
    broker: int
    rate: float
    """Events per second in the base case (no scenario)."""
    arrival: Arrival = "poisson"
    events: tuple[EventSpec, ...] = ()
    """The publisher's event mix; empty: the workload's single event type
    (`monitor.workload` documents those events)."""


def publisher_name(publisher_id: int) -> str:
    """The client name of a case study's publisher: in traces and reports."""
    return f"pub{publisher_id}"


def subscriber_name(subscriber_id: int) -> str:
    """The client name of a case study's subscriber: in traces and reports."""
    return f"sub{subscriber_id}"


@dataclass(frozen=True)
class SubscriberSpec:
    id: int
    broker: int
    filters: tuple[str, ...]
    """Filter texts, one subscription each; parsed by `routing`, not here."""


@dataclass(frozen=True)
class Scenario:
    name: str
    rate_scale: float = 1.0
    rates: dict[int, float] = field(default_factory=dict)
    """Publisher id -> events/s, applied after `rate_scale`."""


ClientMode = Literal["process", "broker", "single"]
CLIENT_MODES: tuple[ClientMode, ...] = ("process", "broker", "single")

DEFAULT_LAUNCHER = "ssh -o BatchMode=yes {address} {command_line}"
DEFAULT_COPY_TO = "scp -q {path} {address}:{dest}"
DEFAULT_COPY_FROM = "scp -q -r {address}:{path}/. {dest}"


@dataclass(frozen=True)
class HostSpec:
    """A host processes run on, known by the address its brokers listen on."""

    address: str
    name: str = ""
    """The name launcher templates get as {host} (default: the address)."""
    launcher: str | None = None
    """How to run a command there (None: the deployment's launcher)."""

    @property
    def label(self) -> str:
        return self.name or self.address


@dataclass(frozen=True)
class ProcessSpec:
    """One client process placed by hand: which clients it runs, and on which host."""

    host: str
    """An address, or the name of a [[deployment.hosts]] entry."""
    publishers: tuple[int, ...] = ()
    subscribers: tuple[int, ...] = ()


@dataclass(frozen=True)
class Deployment:
    """Where a replay runs its processes and how it reaches other hosts
    (docs/across-hosts.md, "Replaying across hosts")."""

    clients: ClientMode = "process"
    """Client processes by default: one per client, one per home broker, or one for
    all (the single-process mode)."""
    launcher: str = DEFAULT_LAUNCHER
    """A command template run on hosts that are not this one; {command} stands for the
    command's words, {command_line} for them as one shell-quoted string, {host} and
    {address} for the host. "{command}" alone runs the command here."""
    python: str | None = None
    """The Python on other hosts (None: the path of this one's)."""
    workdir: str | None = None
    """The run folder on other hosts (None: RUN_DIR's absolute path)."""
    copy_to: str = DEFAULT_COPY_TO
    """Puts a file ({path}) on a host at {dest}; "" for a shared filesystem."""
    copy_from: str = DEFAULT_COPY_FROM
    """Gathers a host's folder ({path}) into {dest}; "" for a shared filesystem."""
    hosts: dict[str, HostSpec] = field(default_factory=dict)
    """By address."""
    processes: tuple[ProcessSpec, ...] = ()

    def host(self, name_or_address: str) -> HostSpec:
        """The host an address or a host name means (an unlisted address: a host of
        its own with the deployment's launcher)."""
        for spec in self.hosts.values():
            if spec.name == name_or_address:
                return spec
        return self.hosts.get(name_or_address, HostSpec(name_or_address))


@dataclass(frozen=True)
class CaseStudy:
    """A topology plus the clients and workload that run on it."""

    topology: Topology
    workload: Workload | None = None
    publishers: dict[int, PublisherSpec] = field(default_factory=dict)
    subscribers: dict[int, SubscriberSpec] = field(default_factory=dict)
    scenarios: dict[str, Scenario] = field(default_factory=dict)
    deployment: Deployment = field(default_factory=Deployment)

    def rates_for(self, scenario_name: str | None = None) -> dict[int, float]:
        """Publisher id -> events/s in a scenario (None: the publishers' own rates)."""
        rates = {pid: publisher.rate for pid, publisher in self.publishers.items()}
        if scenario_name is None:
            return rates
        scenario = self.scenarios.get(scenario_name)
        if scenario is None:
            known = ", ".join(self.scenarios) or "(none)"
            raise TopologyError(
                self.topology.source or self.topology.name,
                "scenarios",
                f"unknown scenario {scenario_name!r}; known scenarios: {known}",
            )
        rates = {pid: rate * scenario.rate_scale for pid, rate in rates.items()}
        rates.update(scenario.rates)
        return rates
