"""Build regular topologies in code, and write topologies / case studies as TOML."""

from __future__ import annotations

import re
from collections.abc import Mapping

from topologies.model import BrokerSpec, CaseStudy, Deployment, EventSpec, Topology

DEFAULT_HOST = "127.0.0.1"
DEFAULT_BASE_PORT = 7000


def kary_tree(
    k: int,
    depth: int,
    name: str | None = None,
    base_port: int = DEFAULT_BASE_PORT,
    host: str = DEFAULT_HOST,
) -> Topology:
    """A complete k-ary tree with `depth` levels below the root.

    Brokers are numbered breadth-first from 1, so the children of broker j are
    k*(j-1)+2 .. k*(j-1)+k+1 (for k = 2: 2j and 2j+1).
    """
    if k < 1 or depth < 0:
        raise ValueError(f"need k >= 1 and depth >= 0, got k={k}, depth={depth}")
    count = sum(k**level for level in range(depth + 1))
    parents = {j: None if j == 1 else (j - 2) // k + 1 for j in range(1, count + 1)}
    return _topology(name or f"tree{count}", parents, base_port, host)


def binary_tree(
    depth: int,
    name: str | None = None,
    base_port: int = DEFAULT_BASE_PORT,
    host: str = DEFAULT_HOST,
) -> Topology:
    """A complete binary tree; depth 3 gives the 15 brokers of the thesis' case study."""
    return kary_tree(2, depth, name, base_port, host)


def chain(
    n: int,
    name: str | None = None,
    base_port: int = DEFAULT_BASE_PORT,
    host: str = DEFAULT_HOST,
) -> Topology:
    """Brokers 1..n in a line; broker 1 is the root and broker i's parent is i-1."""
    if n < 1:
        raise ValueError(f"need n >= 1, got {n}")
    parents = {j: None if j == 1 else j - 1 for j in range(1, n + 1)}
    return _topology(name or f"chain{n}", parents, base_port, host)


def _topology(name: str, parents: dict[int, int | None], base_port: int, host: str) -> Topology:
    if base_port < 0 or base_port + len(parents) > 65535:
        raise ValueError(f"ports base_port+1 .. base_port+{len(parents)} must be in 1..65535")
    brokers = {j: BrokerSpec(j, parent, host, base_port + j) for j, parent in parents.items()}
    return Topology(name=name, host=host, base_port=base_port, brokers=brokers)


def to_toml(study: Topology | CaseStudy) -> str:
    """TOML text that `load_case_study` / `load_topology` read back as an equal object.

    A broker's host and port are written only where they differ from the defaults.
    """
    if isinstance(study, Topology):
        study = CaseStudy(study)
    topology = study.topology
    lines = [
        f"name = {_str(topology.name)}",
        f"host = {_str(topology.host)}",
        f"base_port = {topology.base_port}",
        f"routing = {_str(topology.routing)}",
    ]
    lines += _security_lines(topology)
    for broker in topology.brokers.values():
        lines += ["", "[[brokers]]", f"id = {broker.id}"]
        if broker.parent is not None:
            lines.append(f"parent = {broker.parent}")
        if broker.host != topology.host:
            lines.append(f"host = {_str(broker.host)}")
        if broker.port != topology.base_port + broker.id:
            lines.append(f"port = {broker.port}")
    if study.workload is not None:
        w = study.workload
        lines += [
            "",
            "[workload]",
            f"event_type = {_str(w.event_type)}",
            f"families = {w.families}",
            f"duration_s = {w.duration_s!r}",
            f"warmup_s = {w.warmup_s!r}",
            f"drain_s = {w.drain_s!r}",
            f"seed = {w.seed}",
        ]
    for p in study.publishers.values():
        lines += [
            "",
            "[[publishers]]",
            f"id = {p.id}",
            f"broker = {p.broker}",
            f"rate = {p.rate!r}",
            f"arrival = {_str(p.arrival)}",
        ]
        for event in p.events:
            lines += ["", "[[publishers.events]]", *_event_lines(event)]
    for s in study.subscribers.values():
        filters = "".join(f"\n    {_str(text)}," for text in s.filters)
        lines += [
            "",
            "[[subscribers]]",
            f"id = {s.id}",
            f"broker = {s.broker}",
            f"filters = [{filters}\n]",
        ]
    for scenario in study.scenarios.values():
        rates = ", ".join(f"{pid} = {rate!r}" for pid, rate in scenario.rates.items())
        lines += [
            "",
            "[[scenarios]]",
            f"name = {_str(scenario.name)}",
            f"rate_scale = {scenario.rate_scale!r}",
            f"rates = {{{rates}}}",
        ]
    lines += _deployment_lines(study.deployment)
    return "\n".join(lines) + "\n"


def _deployment_lines(deployment: Deployment) -> list[str]:
    """The [deployment] table, where it differs from the defaults."""
    if deployment == Deployment():
        return []
    lines = ["", "[deployment]", f"clients = {_str(deployment.clients)}"]
    for key in ("launcher", "python", "workdir", "copy_to", "copy_from"):
        value = getattr(deployment, key)
        if value is not None:
            lines.append(f"{key} = {_str(value)}")
    for host in deployment.hosts.values():
        lines += ["", "[[deployment.hosts]]", f"address = {_str(host.address)}"]
        if host.name:
            lines.append(f"name = {_str(host.name)}")
        if host.launcher is not None:
            lines.append(f"launcher = {_str(host.launcher)}")
    for process in deployment.processes:
        lines += ["", "[[deployment.processes]]", f"host = {_str(process.host)}"]
        lines.append(f"publishers = {_value(process.publishers)}")
        lines.append(f"subscribers = {_value(process.subscribers)}")
    return lines


def _event_lines(event: EventSpec) -> list[str]:
    def table(items: Mapping[str, object]) -> str:
        return "{" + ", ".join(f"{_key(name)} = {_value(v)}" for name, v in items.items()) + "}"

    lines = [f"type = {_str(event.type)}", f"weight = {event.weight!r}"]
    if event.attributes:
        lines.append(f"attributes = {table(event.attributes)}")
    if event.choose:
        lines.append(f"choose = {table(event.choose)}")
    if event.ranges:
        lines.append(f"ranges = {table(event.ranges)}")
    lines.append(f"sizes_kb = {_value(event.sizes_kb)}")
    lines.append(f"size_weights = {_value(event.size_weights)}")
    return lines


def _key(name: str) -> str:
    """A TOML key: bare if it can be (a dot would make it a dotted key), else quoted."""
    return name if re.fullmatch(r"[A-Za-z0-9_-]+", name) else _str(name)


def _value(value: object) -> str:
    """A TOML value for a string, bool, int, float or a tuple / list of them."""
    if isinstance(value, str):
        return _str(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple | list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    return repr(value)


def _security_lines(topology: Topology) -> list[str]:
    """Top-level keys and the [tls] table; paths are written absolute."""
    security = topology.security
    lines = []
    if security.secret_file is not None:
        lines.append(f"auth_secret_file = {_str(str(security.secret_file))}")
    if security.client_secret_file is not None:
        lines.append(f"client_secret_file = {_str(str(security.client_secret_file))}")
    if security.tls is not None:
        tls = security.tls
        lines += [
            "",
            "[tls]",
            f"ca = {_str(str(tls.ca))}",
            f"cert = {_str(str(tls.cert))}",
            f"key = {_str(str(tls.key))}",
            f"verify_clients = {str(tls.verify_clients).lower()}",
        ]
    return lines


def _str(text: str) -> str:
    """A TOML basic string: escape quotes, backslashes and control characters."""
    escaped = "".join(
        f"\\u{ord(c):04x}" if ord(c) < 0x20 or ord(c) == 0x7F else c
        for c in text.replace("\\", "\\\\").replace('"', '\\"')
    )
    return f'"{escaped}"'
