"""Load and validate topology / case-study TOML files (docs/design.md, "Topology files").

Keys (required ones marked *; anything else is an error):

- top level: name (default: the file's stem), host (default "127.0.0.1"),
  base_port*, routing ("hierarchical" | "acyclic" | "flooding"), and the tables below;
- [[brokers]]: id*, parent (none for the root), host, port (default base_port + id);
- [workload]: event_type, families, duration_s, warmup_s, plus two keys beyond the
  minimal form: drain_s (seconds to wait for in-flight events after publishing
  stops) and seed (for the random families and arrivals); all have defaults;
- [[publishers]]: id*, broker*, rate*, arrival ("poisson" | "constant"), and
  optionally an event mix (beyond the minimal form), one [[publishers.events]]
  table per kind of event: type*, weight* (> 0, relative to the publisher's other
  kinds), attributes (name -> fixed value), choose (name -> non-empty array of
  values, one drawn uniformly per event), ranges (name -> [lo, hi], drawn uniformly;
  integers if both bounds are), sizes_kb (non-empty array of sizes > 0) and
  size_weights (as many weights; default equal). Attribute names follow the filter
  language (letters, digits, `_`, `.`; quote a name with a dot, `"a.b" = 1`, or
  TOML reads a nested table); `type`, `size_kb` and `payload` are set by
  the generator and cannot be given, and a name may appear in only one of
  attributes / choose / ranges. Values are strings, integers, floats or booleans.
  Without `events` a publisher emits the workload's single event type;
- [[subscribers]]: id*, broker*, filters* (a non-empty list of filter texts);
- [[scenarios]]: name*, rate_scale (> 0, default 1), rates (publisher id -> events/s);
- security, beyond the minimal form (docs/across-hosts.md): top-level
  auth_secret_file (the network secret, required from brokers and clients) and
  client_secret_file (the secret clients present instead, if given), and a [tls] table:
  ca*, cert*, key* (PEM files), verify_clients (require client certificates, default
  false). Relative paths are resolved against the file's folder; every named file must
  exist. The files hold the secrets and keys; the topology only names them.

- [deployment], for replays (docs/across-hosts.md): clients ("process" | "broker" |
  "single"), launcher, python, workdir, copy_to, copy_from (command templates with
  {command}, {command_line}, {host}, {address}, {path}, {dest}), [[deployment.hosts]]
  (address*, name, launcher) and [[deployment.processes]] (host*, publishers,
  subscribers: client placement by hand).

Ids are integers from 1. Every problem becomes a `TopologyError` naming the file and
the field, e.g. ``siena15.toml: brokers[3].parent: broker 99 does not exist``; array
indexes in field names count from 0, in file order.
"""

from __future__ import annotations

import codecs
import math
import re
import tomllib
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any, NoReturn

from topologies.model import (
    ARRIVALS,
    CLIENT_MODES,
    ROUTINGS,
    BrokerSpec,
    CaseStudy,
    Deployment,
    EventSpec,
    HostSpec,
    ProcessSpec,
    PublisherSpec,
    Scenario,
    Security,
    SubscriberSpec,
    TlsFiles,
    Topology,
    TopologyError,
    Workload,
)

FilterParser = Callable[[str], object]

_TOP_KEYS = (
    "name",
    "host",
    "base_port",
    "routing",
    "brokers",
    "workload",
    "publishers",
    "subscribers",
    "scenarios",
    "auth_secret_file",
    "client_secret_file",
    "tls",
    "deployment",
)
_DEPLOYMENT_KEYS = (
    "clients",
    "launcher",
    "python",
    "workdir",
    "copy_to",
    "copy_from",
    "hosts",
    "processes",
)
_TLS_KEYS = ("ca", "cert", "key", "verify_clients")
_WORKLOAD_KEYS = ("event_type", "families", "duration_s", "warmup_s", "drain_s", "seed")
_DEFAULT_HOST = "127.0.0.1"
_ID = re.compile(r"[0-9]+")
_EVENT_KEYS = (
    "type",
    "weight",
    "attributes",
    "choose",
    "ranges",
    "sizes_kb",
    "size_weights",
)
_ATTRIBUTE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")
_GENERATED_ATTRIBUTES = ("type", "size_kb", "payload")


class _Invalid(Exception):
    """A problem at a field; `load_case_study` adds the file name."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(field, problem)
        self.field = field
        self.problem = problem


def _fail(field: str, problem: str) -> NoReturn:
    raise _Invalid(field, problem)


def load_topology(path: str | Path, *, files_needed: bool = True) -> Topology:
    """The topology of a file, which may or may not describe a workload.

    The whole file is still validated, so a file is valid or not the same way for
    every command that reads it.
    """
    return load_case_study(path, files_needed=files_needed).topology


def load_case_study(
    path: str | Path, filter_parser: FilterParser | None = None, *, files_needed: bool = True
) -> CaseStudy:
    """Load and validate a case study.

    `filter_parser`, if given (normally `routing.parse_filter`), is called on every
    filter text; a `ValueError` from it is reported at ``subscribers[i].filters[j]``.
    Without `files_needed`, the secret and certificate files the study names need not
    exist: for readers of a run's copy that use only its network and workload (the
    copy may have moved to a host without them).
    """
    file = str(path)
    try:
        with open(path, "rb") as f:
            data = f.read()
        # A byte-order mark, which some editors write, is not TOML: skipped.
        doc = tomllib.loads(data.removeprefix(codecs.BOM_UTF8).decode("utf-8"))
    except OSError as e:
        raise TopologyError(file, None, f"cannot read: {e.strerror or e}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise TopologyError(file, None, f"invalid TOML: {e}") from None
    except RecursionError:  # (tomllib parses nested arrays and tables recursively)
        raise TopologyError(file, None, "invalid TOML: nested too deeply") from None
    try:
        return _case_study(doc, Path(path).stem, file, filter_parser, files_needed)
    except _Invalid as e:
        raise TopologyError(file, e.field, e.problem) from None


def _case_study(
    doc: dict[str, Any],
    stem: str,
    file: str,
    filter_parser: FilterParser | None,
    files_needed: bool,
) -> CaseStudy:
    _keys(doc, "", required=("base_port", "brokers"), allowed=_TOP_KEYS)
    topology = _topology(doc, stem, file)
    topology = replace(topology, security=_security(doc, Path(file).parent, files_needed))
    workload = _workload(doc["workload"], "workload") if "workload" in doc else None
    publishers = _publishers(doc, topology)
    subscribers = _subscribers(doc, topology, filter_parser)
    return CaseStudy(
        topology=topology,
        workload=workload,
        publishers=publishers,
        subscribers=subscribers,
        scenarios=_scenarios(doc, publishers),
        deployment=_deployment(doc, publishers, subscribers),
    )


# --- topology -------------------------------------------------------------------------


def _topology(doc: dict[str, Any], stem: str, file: str) -> Topology:
    name = _string(doc.get("name", stem), "name")
    host = _string(doc.get("host", _DEFAULT_HOST), "host")
    base_port = _int(doc["base_port"], "base_port", 0, 65535)
    routing = doc.get("routing", "hierarchical")
    if routing not in ROUTINGS:
        _fail("routing", f"must be one of {_choices(ROUTINGS)}, got {routing!r}")

    brokers: dict[int, BrokerSpec] = {}
    where: dict[int, str] = {}  # broker id -> "brokers[i]", for messages
    addresses: dict[tuple[str, int], int] = {}
    for i, entry in enumerate(_array_of_tables(doc["brokers"], "brokers")):
        at = f"brokers[{i}]"
        _keys(entry, at, required=("id",), allowed=("id", "parent", "host", "port"))
        broker_id = _int(entry["id"], f"{at}.id", 1)
        if broker_id in brokers:
            _fail(f"{at}.id", f"duplicate broker id {broker_id} (also {where[broker_id]})")
        parent = _int(entry["parent"], f"{at}.parent", 1) if "parent" in entry else None
        broker_host = _string(entry.get("host", host), f"{at}.host")
        if "port" in entry:
            port = _int(entry["port"], f"{at}.port", 1, 65535)
        else:
            port = base_port + broker_id
            if port > 65535:
                _fail(at, f"port base_port + id = {port} is out of range 1..65535")
        if (broker_host, port) in addresses:
            other = addresses[(broker_host, port)]
            _fail(
                at, f"address {broker_host}:{port} is also used by broker {other} ({where[other]})"
            )
        addresses[(broker_host, port)] = broker_id
        brokers[broker_id] = BrokerSpec(broker_id, parent, broker_host, port)
        where[broker_id] = at
    if not brokers:
        _fail("brokers", "at least one broker is required")
    _check_tree(brokers, where)
    return Topology(name, host, base_port, routing, brokers, source=file)


def _check_tree(brokers: dict[int, BrokerSpec], where: dict[int, str]) -> None:
    """The brokers must form exactly one tree: parents exist, one root, no cycle."""
    for broker in brokers.values():
        if broker.parent is not None and broker.parent not in brokers:
            _fail(f"{where[broker.id]}.parent", f"broker {broker.parent} does not exist")
    roots = [b.id for b in brokers.values() if b.parent is None]
    if not roots:
        _fail("brokers", "no root: every broker has a parent (a topology is one tree)")
    if len(roots) > 1:
        _fail("brokers", f"a topology is one tree, but brokers {_ids(roots)} have no parent")
    reaches_root = set(roots)
    for broker in brokers.values():
        chain: list[int] = []
        current: int | None = broker.id
        while current is not None and current not in reaches_root:
            if current in chain:
                cycle = chain[chain.index(current) :] + [current]
                _fail(
                    f"{where[current]}.parent",
                    "cycle " + " -> ".join(map(str, cycle)) + " (a topology is one tree)",
                )
            chain.append(current)
            current = brokers[current].parent
        reaches_root.update(chain)


# --- security -------------------------------------------------------------------------


def _security(doc: dict[str, Any], folder: Path, files_needed: bool) -> Security:
    tls = None
    if "tls" in doc:
        entry = _keys(doc["tls"], "tls", required=("ca", "cert", "key"), allowed=_TLS_KEYS)
        verify_clients = entry.get("verify_clients", False)
        if not isinstance(verify_clients, bool):
            _fail("tls.verify_clients", f"must be true or false, got {_kind(verify_clients)}")
        tls = TlsFiles(
            ca=_file(entry["ca"], "tls.ca", folder, files_needed),
            cert=_file(entry["cert"], "tls.cert", folder, files_needed),
            key=_file(entry["key"], "tls.key", folder, files_needed),
            verify_clients=verify_clients,
        )
    return Security(
        secret_file=_optional_file(doc, "auth_secret_file", folder, files_needed),
        client_secret_file=_optional_file(doc, "client_secret_file", folder, files_needed),
        tls=tls,
    )


def _optional_file(doc: dict[str, Any], key: str, folder: Path, needed: bool) -> Path | None:
    return _file(doc[key], key, folder, needed) if key in doc else None


def _file(value: object, at: str, folder: Path, needed: bool) -> Path:
    """An existing file, if `needed`; a relative path is taken from the topology file's
    folder."""
    path = folder / _string(value, at)
    if needed and not path.is_file():
        _fail(at, f"{'not a file' if path.exists() else 'file not found'}: {path}")
    return path.resolve()


# --- workload and clients -------------------------------------------------------------


def _workload(value: object, at: str) -> Workload:
    entry = _keys(value, at, required=(), allowed=_WORKLOAD_KEYS)
    defaults = Workload()
    return Workload(
        event_type=_string(entry.get("event_type", defaults.event_type), f"{at}.event_type"),
        families=_int(entry.get("families", defaults.families), f"{at}.families", 1),
        duration_s=_number(
            entry.get("duration_s", defaults.duration_s), f"{at}.duration_s", positive=True
        ),
        warmup_s=_number(entry.get("warmup_s", defaults.warmup_s), f"{at}.warmup_s"),
        drain_s=_number(entry.get("drain_s", defaults.drain_s), f"{at}.drain_s"),
        seed=_int(entry.get("seed", defaults.seed), f"{at}.seed"),
    )


def _publishers(doc: dict[str, Any], topology: Topology) -> dict[int, PublisherSpec]:
    publishers: dict[int, PublisherSpec] = {}
    for i, entry in enumerate(_array_of_tables(doc.get("publishers", []), "publishers")):
        at = f"publishers[{i}]"
        _keys(
            entry,
            at,
            required=("id", "broker", "rate"),
            allowed=("id", "broker", "rate", "arrival", "events"),
        )
        publisher_id = _client_id(entry, at, publishers, "publisher")
        arrival = entry.get("arrival", "poisson")
        if arrival not in ARRIVALS:
            _fail(f"{at}.arrival", f"must be one of {_choices(ARRIVALS)}, got {arrival!r}")
        publishers[publisher_id] = PublisherSpec(
            id=publisher_id,
            broker=_broker_ref(entry["broker"], f"{at}.broker", topology),
            rate=_number(entry["rate"], f"{at}.rate"),
            arrival=arrival,
            events=_events(entry["events"], f"{at}.events") if "events" in entry else (),
        )
    return publishers


def _events(value: object, at: str) -> tuple[EventSpec, ...]:
    entries = _array_of_tables(value, at)
    if not entries:
        _fail(at, "must not be empty (leave `events` out for the workload's event type)")
    events = []
    for i, entry in enumerate(entries):
        where = f"{at}[{i}]"
        _keys(entry, where, required=("type", "weight"), allowed=_EVENT_KEYS)
        seen: dict[str, str] = {}
        attributes = {
            name: _scalar(v, f"{where}.attributes.{name}")
            for name, v in _attribute_table(entry, "attributes", where, seen).items()
        }
        choose = {}
        for name, values in _attribute_table(entry, "choose", where, seen).items():
            field = f"{where}.choose.{name}"
            if not isinstance(values, list) or not values:
                _fail(field, "must be a non-empty array of values")
            choose[name] = tuple(_scalar(v, f"{field}[{j}]") for j, v in enumerate(values))
        ranges = {}
        for name, bounds in _attribute_table(entry, "ranges", where, seen).items():
            field = f"{where}.ranges.{name}"
            if not isinstance(bounds, list) or len(bounds) != 2:
                _fail(field, "must be an array [lo, hi] of two numbers")
            lo, hi = (_signed_number(b, f"{field}[{j}]") for j, b in enumerate(bounds))
            if lo > hi:
                _fail(field, f"lo must not exceed hi, got [{lo}, {hi}]")
            ranges[name] = (lo, hi)
        sizes, weights = EventSpec.sizes_kb, EventSpec.size_weights
        if "sizes_kb" in entry:
            sizes = _numbers(entry["sizes_kb"], f"{where}.sizes_kb", positive=True)
            weights = (1.0,) * len(sizes)
        if "size_weights" in entry:
            weights = _numbers(entry["size_weights"], f"{where}.size_weights")
            if len(weights) != len(sizes):
                _fail(f"{where}.size_weights", f"needs {len(sizes)} weights, one per size")
            if not sum(weights) > 0:
                _fail(f"{where}.size_weights", "at least one weight must be more than 0")
        events.append(
            EventSpec(
                type=_string(entry["type"], f"{where}.type"),
                weight=_number(entry["weight"], f"{where}.weight", positive=True),
                attributes=attributes,
                choose=choose,
                ranges=ranges,
                sizes_kb=sizes,
                size_weights=weights,
            )
        )
    return tuple(events)


def _attribute_table(
    entry: dict[str, Any], key: str, at: str, seen: dict[str, str]
) -> dict[str, Any]:
    """`entry[key]` as a table of attribute names, each name used once per event kind."""
    table = _table(entry.get(key, {}), f"{at}.{key}")
    for name in table:
        field = f"{at}.{key}.{name}"
        if not _ATTRIBUTE_NAME.fullmatch(name):
            _fail(field, "not an attribute name (letters, digits, _ and ., not digit first)")
        if name in _GENERATED_ATTRIBUTES:
            _fail(field, f"{name!r} is set by the event generator")
        if name in seen:
            _fail(field, f"attribute {name!r} is also given in {seen[name]}")
        seen[name] = key
    return table


def _subscribers(
    doc: dict[str, Any], topology: Topology, filter_parser: FilterParser | None
) -> dict[int, SubscriberSpec]:
    subscribers: dict[int, SubscriberSpec] = {}
    for i, entry in enumerate(_array_of_tables(doc.get("subscribers", []), "subscribers")):
        at = f"subscribers[{i}]"
        _keys(entry, at, required=("id", "broker", "filters"), allowed=("id", "broker", "filters"))
        subscriber_id = _client_id(entry, at, subscribers, "subscriber")
        broker = _broker_ref(entry["broker"], f"{at}.broker", topology)
        filters = entry["filters"]
        if not isinstance(filters, list) or not filters:
            _fail(f"{at}.filters", "must be a non-empty list of filter strings")
        for j, text in enumerate(filters):
            _string(text, f"{at}.filters[{j}]")
            if filter_parser is not None:
                try:
                    filter_parser(text)
                except ValueError as e:
                    _fail(f"{at}.filters[{j}]", f"bad filter {text!r}: {e}")
        subscribers[subscriber_id] = SubscriberSpec(subscriber_id, broker, tuple(filters))
    return subscribers


def _scenarios(doc: dict[str, Any], publishers: dict[int, PublisherSpec]) -> dict[str, Scenario]:
    scenarios: dict[str, Scenario] = {}
    for i, entry in enumerate(_array_of_tables(doc.get("scenarios", []), "scenarios")):
        at = f"scenarios[{i}]"
        _keys(entry, at, required=("name",), allowed=("name", "rate_scale", "rates"))
        name = _string(entry["name"], f"{at}.name")
        if name in scenarios:
            _fail(f"{at}.name", f"duplicate scenario name {name!r}")
        rate_scale = _number(entry.get("rate_scale", 1.0), f"{at}.rate_scale", positive=True)
        rates: dict[int, float] = {}
        for key, rate in _table(entry.get("rates", {}), f"{at}.rates").items():
            if not _ID.fullmatch(key):
                _fail(f"{at}.rates", f"key {key!r} is not a publisher id (an integer)")
            publisher_id = int(key)
            if publisher_id in rates:
                _fail(f"{at}.rates.{key}", f"publisher {publisher_id} is given twice")
            if publisher_id not in publishers:
                _fail(f"{at}.rates.{key}", f"publisher {publisher_id} does not exist")
            rates[publisher_id] = _number(rate, f"{at}.rates.{key}")
        scenarios[name] = Scenario(name, rate_scale, rates)
    return scenarios


def _deployment(
    doc: dict[str, Any],
    publishers: dict[int, PublisherSpec],
    subscribers: dict[int, SubscriberSpec],
) -> Deployment:
    if "deployment" not in doc:
        return Deployment()
    entry = _keys(doc["deployment"], "deployment", required=(), allowed=_DEPLOYMENT_KEYS)
    defaults = Deployment()
    clients = entry.get("clients", defaults.clients)
    if clients not in CLIENT_MODES:
        _fail("deployment.clients", f"must be one of {_choices(CLIENT_MODES)}, got {clients!r}")
    texts = {}
    for key in ("launcher", "copy_to", "copy_from"):
        value = entry.get(key, getattr(defaults, key))
        if key != "launcher" and value == "":
            texts[key] = ""  # a shared filesystem: nothing to copy
        else:
            texts[key] = _string(value, f"deployment.{key}")
    _template(texts["launcher"], "deployment.launcher", launcher=True)
    for key in ("copy_to", "copy_from"):
        _template(texts[key], f"deployment.{key}")
    hosts: dict[str, HostSpec] = {}
    for i, item in enumerate(_array_of_tables(entry.get("hosts", []), "deployment.hosts")):
        at = f"deployment.hosts[{i}]"
        item = _keys(item, at, required=("address",), allowed=("address", "name", "launcher"))
        address = _string(item["address"], f"{at}.address")
        if address in hosts:
            _fail(f"{at}.address", f"host {address} is listed twice")
        launcher = item.get("launcher")
        if launcher is not None:
            _template(_string(launcher, f"{at}.launcher"), f"{at}.launcher", launcher=True)
        hosts[address] = HostSpec(address, _string(item.get("name", ""), f"{at}.name"), launcher)
    names = [h.name for h in hosts.values() if h.name]
    if len(names) != len(set(names)):
        _fail("deployment.hosts", "two hosts have the same name")
    known_hosts = set(hosts) | set(names)
    placed: dict[tuple[str, int], str] = {}
    processes = []
    allowed = ("host", "publishers", "subscribers")
    for i, item in enumerate(_array_of_tables(entry.get("processes", []), "deployment.processes")):
        at = f"deployment.processes[{i}]"
        item = _keys(item, at, required=("host",), allowed=allowed)
        host = _string(item["host"], f"{at}.host")
        if "." not in host and ":" not in host and host not in known_hosts | {"localhost"}:
            _fail(f"{at}.host", f"{host!r} is neither an address nor a name in deployment.hosts")
        ids = {}
        known_ids: dict[str, dict[int, Any]] = {
            "publishers": publishers,
            "subscribers": subscribers,
        }
        for kind, known in known_ids.items():
            values = item.get(kind, [])
            if not isinstance(values, list):
                _fail(f"{at}.{kind}", "must be an array of ids")
            ids[kind] = tuple(_int(v, f"{at}.{kind}[{j}]", 1) for j, v in enumerate(values))
            for client_id in ids[kind]:
                if client_id not in known:
                    _fail(f"{at}.{kind}", f"{kind[:-1]} {client_id} does not exist")
                if (kind, client_id) in placed:
                    _fail(f"{at}.{kind}", f"{kind[:-1]} {client_id} is placed twice")
                placed[(kind, client_id)] = at
        if not ids["publishers"] and not ids["subscribers"]:
            _fail(at, "names no publisher and no subscriber")
        processes.append(ProcessSpec(host, ids["publishers"], ids["subscribers"]))
    python = entry.get("python")
    workdir = entry.get("workdir")
    return Deployment(
        clients=clients,
        launcher=texts["launcher"],
        python=None if python is None else _string(python, "deployment.python"),
        workdir=None if workdir is None else _string(workdir, "deployment.workdir"),
        copy_to=texts["copy_to"],
        copy_from=texts["copy_from"],
        hosts=hosts,
        processes=tuple(processes),
    )


_PLACEHOLDERS = {"command", "command_line", "host", "address", "path", "dest"}


def _template(text: str, at: str, launcher: bool = False) -> None:
    """A command template: known {placeholders} only; a launcher runs the command."""
    found = set(re.findall(r"\{([^{}]*)\}", text))
    unknown = found - _PLACEHOLDERS
    if unknown:
        _fail(at, f"unknown placeholder(s) {_choices(sorted(unknown))}")
    if launcher and not found & {"command", "command_line"}:
        _fail(at, "must contain {command} or {command_line}")


def _client_id(entry: dict[str, Any], at: str, seen: dict[int, Any], kind: str) -> int:
    client_id = _int(entry["id"], f"{at}.id", 1)
    if client_id in seen:
        _fail(f"{at}.id", f"duplicate {kind} id {client_id}")
    return client_id


def _broker_ref(value: object, at: str, topology: Topology) -> int:
    broker_id = _int(value, at)
    if broker_id not in topology.brokers:
        _fail(at, f"broker {broker_id} does not exist")
    return broker_id


# --- generic checks -------------------------------------------------------------------


def _kind(value: object) -> str:
    names = {
        bool: "a boolean",
        int: "an integer",
        float: "a float",
        str: "a string",
        list: "an array",
        dict: "a table",
    }
    return names.get(type(value), type(value).__name__)


def _table(value: object, at: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        _fail(at, f"must be a table, got {_kind(value)}")
    return value


def _keys(
    value: object, at: str, *, required: Iterable[str], allowed: Iterable[str]
) -> dict[str, Any]:
    """`value` must be a table with every required key and no key outside `allowed`."""
    entry = _table(value, at or "(top level)")
    prefix = f"{at}." if at else ""
    allowed = tuple(allowed)
    for key in entry:
        if key not in allowed:
            _fail(f"{prefix}{key}", f"unknown key; allowed keys: {', '.join(allowed)}")
    for key in required:
        if key not in entry:
            _fail(f"{prefix}{key}", "missing required key")
    return entry


def _array_of_tables(value: object, at: str) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        _fail(at, f"must be an array of tables ([[{at}]]), got {_kind(value)}")
    for i, entry in enumerate(value):
        _table(entry, f"{at}[{i}]")
    return value


def _int(value: object, at: str, minimum: int | None = None, maximum: int | None = None) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        _fail(at, f"must be an integer, got {_kind(value)}")
    if minimum is not None and value < minimum:
        _fail(at, f"must be at least {minimum}, got {value}")
    if maximum is not None and value > maximum:
        _fail(at, f"must be at most {maximum}, got {value}")
    return value


def _number(value: object, at: str, *, positive: bool = False) -> float:
    """A finite number, at least 0 (more than 0 if `positive`); ints are accepted."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        _fail(at, f"must be a number, got {_kind(value)}")
    if not math.isfinite(value):
        _fail(at, f"must be finite, got {value}")
    if value < 0 or (positive and value == 0):
        _fail(at, f"must be {'more than' if positive else 'at least'} 0, got {value}")
    return float(value)


def _signed_number(value: object, at: str) -> int | float:
    """A finite int or float, kept as it is (negative allowed)."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        _fail(at, f"must be a number, got {_kind(value)}")
    if not math.isfinite(value):
        _fail(at, f"must be finite, got {value}")
    return value


def _numbers(value: object, at: str, *, positive: bool = False) -> tuple[float, ...]:
    if not isinstance(value, list) or not value:
        _fail(at, "must be a non-empty array of numbers")
    return tuple(_number(v, f"{at}[{i}]", positive=positive) for i, v in enumerate(value))


def _scalar(value: object, at: str) -> str | int | float | bool:
    """An attribute value: a string, integer, finite float or boolean."""
    if isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            _fail(at, f"must be finite, got {value}")
        return value
    _fail(at, f"must be a string, integer, float or boolean, got {_kind(value)}")


def _string(value: object, at: str) -> str:
    if not isinstance(value, str):
        _fail(at, f"must be a string, got {_kind(value)}")
    if not value.strip():
        _fail(at, "must not be empty")
    return value


def _choices(values: Iterable[str]) -> str:
    return ", ".join(repr(v) for v in values)


def _ids(values: Iterable[int]) -> str:
    return ", ".join(map(str, values))
