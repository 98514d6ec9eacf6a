"""The client layer's part of the `hop` command line: `hop sub`, `hop pub`, `hop stats`,
`hop ping`, manual clients for trying a network by hand."""

from __future__ import annotations

import argparse
import contextlib
import functools
import ipaddress
import itertools
import json
import os
import ssl
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TextIO

import trio

import client
from broker import logs
from broker.cli import (
    EXIT_FAILURE,
    EXIT_OK,
    FILE_HELP,
    BadInput,
    Layer,
    add_secret_option,
    load_study,
    positive_int,
    positive_number,
    secret_file,
)
from broker.messages import ProtocolError
from broker.netio import host_port
from broker.probe import StatsSession
from broker.protocol import ERR_LIMIT
from broker.security import (
    SECRET_ENV,
    SECRET_FILE_ENV,
    ClientCredentials,
    client_ssl_context,
    read_secret,
    secret_from_env,
)
from client.aio import ClientError
from client.ping import Pings, ping
from client.stats_watch import Target, watch
from routing import FilterSyntaxError, parse_filter, validate_event
from topologies import SHIPPED, Topology, TopologyError

STATS_TIMEOUT_S = 5.0  # per broker of a network: one that hangs is named, not waited on


def address(text: str) -> tuple[str, int]:
    """HOST:PORT (an IPv6 address in brackets: [::1]:7301), or BadInput."""
    host, sep, port = text.rpartition(":")
    hint = ""
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host or "/" in host:  # an IPv6 address unbracketed, a URL, a port too many
        if _is_ipv6(host):
            hint = f" (an IPv6 address goes in brackets: [{host}]:{port})"
        host = ""
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise BadInput(f"expected HOST:PORT, got {text!r}{hint}")
    return host, int(port)


def _is_ipv6(text: str) -> bool:
    try:
        return isinstance(ipaddress.ip_address(text), ipaddress.IPv6Address)
    except ValueError:
        return False


def checked_text(text: str, what: str) -> str:
    """``text`` if it can be sent (UTF-8), else BadInput naming ``what``: a byte of an
    argument that is not UTF-8 reaches Python as a lone surrogate, which no message can
    carry."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise BadInput(f"{what}: {text!r} is not valid UTF-8 text") from None
    return text


def event_count(text: str) -> int:
    """An argparse type: a count of events, 1 to sys.maxsize."""
    value = positive_int(text)
    if value > sys.maxsize:
        raise argparse.ArgumentTypeError(f"must be at most {sys.maxsize}, got {value}")
    return value


def event_rate(text: str) -> float:
    """An argparse type: events per second, from one each 1000 s (a longer pause between
    two events is no rate) to 1e9."""
    value = positive_number(text)
    if not 1e-3 <= value <= 1e9:
        raise argparse.ArgumentTypeError(f"must be 0.001 to 1e9 events per second, got {text}")
    return value


MIN_INTERVAL_S = 0.1  # hop stats --every: shorter, the rates are mostly noise


def stats_interval(text: str) -> float:
    """An argparse type: `hop stats --every`'s seconds, at least MIN_INTERVAL_S."""
    value = positive_number(text)
    if value < MIN_INTERVAL_S:
        raise argparse.ArgumentTypeError(f"must be at least {MIN_INTERVAL_S:g} s, got {text}")
    return value


def value(text: str) -> Any:
    """A command-line attribute value: int, float, true/false, else a string.

    Quote a value to force a string: `code='"7"'`.
    """
    if len(text) >= 2 and text[0] == text[-1] == '"':
        return text[1:-1]
    if text in ("true", "false"):
        return text == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def attributes(pairs: list[str]) -> dict[str, Any]:
    """name=value pairs as an event's attributes, or BadInput."""
    out = {}
    for pair in pairs:
        name, sep, text = pair.partition("=")
        if not sep or not name:
            raise BadInput(f"expected name=value, got {pair!r}")
        out[name] = value(text)
    try:
        validate_event(out)
    except (TypeError, ValueError) as exc:
        raise BadInput(str(exc)) from None
    return checked_texts(out)


def checked_texts(event: dict[str, Any], where: str = "") -> dict[str, Any]:
    """``event`` if its text values can be sent (`checked_text`; `validate_event` holds
    names to identifiers)."""
    for name, given in event.items():
        if isinstance(given, str):
            checked_text(given, f"{where}attribute {name!r}")
    return event


def credentials(args: argparse.Namespace) -> ClientCredentials:
    """A client command's secret (--secret-file, else the environment) and TLS context."""
    path = secret_file(args)
    try:
        secret = read_secret(path) if path else secret_from_env()
    except (OSError, ValueError) as exc:  # (only the environment's file is left to read)
        raise BadInput(f"${SECRET_FILE_ENV}: {exc}") from None
    context: ssl.SSLContext | None = None
    if args.ca:
        try:
            cert = Path(args.cert) if args.cert else None
            key = Path(args.key) if args.key else None
            context = client_ssl_context(Path(args.ca), cert, key)
        except (OSError, ssl.SSLError) as exc:
            raise BadInput(f"--ca/--cert/--key: {exc}") from None
    elif args.cert or args.key:
        raise BadInput("--cert and --key need --ca (TLS)")
    return ClientCredentials(secret, context)


def cmd_sub(args: argparse.Namespace) -> int:
    filters = [parse_filter(checked_text(text, "filter")) for text in args.filters]
    checked_text(args.name, "--name")
    host, port = address(args.address)
    creds = credentials(args)
    printer = EventPrinter(args.count)
    with (
        reader_may_leave(sys.stdout),
        contextlib.suppress(KeyboardInterrupt),
        refused_as_bad_input("a filter"),
    ):
        trio.run(
            _subscribe_and_print, host, port, args.name, filters, printer, creds, args.reconnect
        )
    return EXIT_OK


@contextlib.contextmanager
def reader_may_leave(stream: TextIO) -> Iterator[None]:
    """End the block quietly if the reader of `stream`, the command's output, is gone
    (`hop sub ... | head`, `hop stats ... | head -1`): the end, as for any filter,
    since what it would write is no longer wanted. The stream then goes to /dev/null,
    so that Python's flush at exit does not fail on it again."""
    try:
        yield
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())


class EventPrinter:
    """Prints each delivered event's attributes once as a JSON line, in the order the
    events arrive, however many of the filters it matched; after ``count`` events (if
    given) it prints nothing more and calls ``on_done``.

    A Deliver names every subscription of the connection that it matched, and the
    client hands its one Delivery to their handlers one after the other, so once every
    subscription is made, a repeat is the very object printed last: nothing grows with
    the events seen, however long it runs. Only while subscribing, when a subscription
    hands over what came before its acknowledgement, are the ids printed remembered."""

    def __init__(self, count: int | None, out: TextIO | None = None) -> None:
        self.count = count
        self.printed = 0
        self.on_done: Callable[[], object] | None = None
        self._out = out
        self._last: client.Delivery | None = None
        self._seen: set[str] | None = set()  # the ids printed while subscribing

    def settled(self) -> None:
        """Every subscription is made: repeats come one after the other from now on."""
        self._seen = None

    def show(self, delivery: client.Delivery) -> None:
        """A subscription's handler."""
        if delivery is self._last or self.printed == self.count:
            return
        if self._seen is not None:
            if delivery.event_id in self._seen:
                return
            self._seen.add(delivery.event_id)
        self._last = delivery
        line = json.dumps(_printable(delivery.attributes), sort_keys=True)
        logs.emit(line, self._out)
        self.printed += 1
        if self.printed == self.count and self.on_done is not None:
            self.on_done()


async def _subscribe_and_print(
    host: str,
    port: int,
    name: str,
    filters: list[Any],
    printer: EventPrinter,
    creds: ClientCredentials,
    reconnect: bool,
) -> None:
    """Several filters are a disjunction (`EventPrinter`). Returns once ``printer`` has
    printed its count; raises what ended the connection (for good, with ``reconnect``)."""

    def disconnected(error: client.ConnectionLost) -> None:
        logs.say(f"hop sub: connection lost: {error}")

    def reconnected() -> None:
        logs.say(f"hop sub: reconnected, {len(filters)} filter(s) renewed")

    async with client.open_client(
        host, port, name=name, secret=creds.secret, ssl_context=creds.ssl_context,
        reconnect=reconnect, on_disconnect=disconnected if reconnect else None,
        on_reconnect=reconnected if reconnect else None,
    ) as c:  # fmt: skip
        for f in filters:
            await c.subscribe(f, handler=printer.show)
        printer.settled()
        logs.say(f"subscribed to {len(filters)} filter(s) at {host_port(host, port)}")
        with trio.CancelScope() as done:
            printer.on_done = done.cancel
            if printer.printed != printer.count:
                await c.wait_closed()


def _printable(attributes: dict[str, Any]) -> dict[str, Any]:
    return {k: (v.hex() if isinstance(v, bytes) else v) for k, v in attributes.items()}


STDIN = "-"
"""`hop pub`'s event argument that reads the events from standard input instead."""


def cmd_pub(args: argparse.Namespace) -> int:
    lines = STDIN in args.attributes
    if lines and (len(args.attributes) > 1 or args.count is not None):
        raise BadInput(f"{STDIN!r} reads the events from standard input: give no name=value "
                       "pairs and no --count with it")  # fmt: skip
    checked_text(args.name, "--name")
    host, port = address(args.address)
    creds = credentials(args)
    if lines:
        events: Iterable[tuple[str, dict[str, Any]]] = json_lines(sys.stdin)
    else:
        event = attributes(args.attributes)
        events = itertools.repeat(("the event", event), args.count or 1)
    published = 0
    with (
        refused_as_bad_input("an event"),
        client.Client.connect(
            host, port, name=args.name, secret=creds.secret, ssl_context=creds.ssl_context
        ) as c,
    ):
        try:
            for where, event in events:
                if args.rate and published:
                    time.sleep(1.0 / args.rate)
                try:
                    c.publish(event)
                except (TypeError, ValueError) as exc:  # (over the frame size, say)
                    raise BadInput(f"{where}: {exc}") from None
                published += 1
        except BadInput as exc:
            c.flush()
            raise BadInput(f"{exc} (the {published} event(s) before it were published)") from None
        c.flush()
    with reader_may_leave(sys.stderr):  # (its one output: `hop pub ... 2>&1 | head -0`)
        logs.say(f"published {published} event(s) to {host_port(host, port)}")
    return EXIT_OK


@contextlib.contextmanager
def refused_as_bad_input(what: str) -> Iterator[None]:
    """A broker's refusal of ``what`` over one of its limits (it closes the connection
    with an Error) as BadInput: the user's to correct, as a bad filter is."""
    try:
        yield
    except client.BrokerError as exc:
        if exc.code != ERR_LIMIT:
            raise
        raise BadInput(f"the broker refused {what} over its limits: {exc}") from None


def json_lines(lines: Iterable[str]) -> Iterator[tuple[str, dict[str, Any]]]:
    """The events of ``lines``, each a JSON object of attributes (as `hop sub` prints
    them; blank lines skipped), as they come, each with "line N"; BadInput naming the
    line of one that is not an event."""
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            event = json.loads(line)
            if type(event) is not dict:
                raise TypeError(f"expected a JSON object of attributes, got {line.strip()!r}")
            validate_event(event)
        except (ValueError, TypeError) as exc:  # (json's errors are ValueErrors)
            raise BadInput(f"line {number}: {exc}") from None
        yield f"line {number}", checked_texts(event, f"line {number}: ")


def cmd_stats(args: argparse.Namespace) -> int:
    checked_text(args.name, "--name")
    if args.every is None and (args.count is not None or args.json):
        raise BadInput("--count and --json go with --every (without it, hop stats prints JSON)")
    if args.every is not None:
        return _watch_stats(args)
    if names_a_network(args.address):
        return _network_stats(args)
    host, port = address(args.address)
    creds = credentials(args)
    with client.Client.connect(
        host, port, name=args.name, secret=creds.secret, ssl_context=creds.ssl_context
    ) as c:
        stats = c.stats()
    with reader_may_leave(sys.stdout):
        logs.emit(json.dumps(stats, indent=2, sort_keys=True))
    return EXIT_OK


def cmd_ping(args: argparse.Namespace) -> int:
    checked_text(args.name, "--name")
    source = address(args.address)
    target = address(args.to) if args.to else source
    creds = credentials(args)
    pings = Pings()
    with reader_may_leave(sys.stdout):
        try:
            trio.run(
                ping, source, target, args.count, args.interval, args.timeout, args.name,
                creds, pings, logs.emit,
            )  # fmt: skip
        finally:  # (also when interrupted: what was measured, as ping says)
            if pings.sent:
                logs.emit(pings.summary(source, target))
    return EXIT_FAILURE if pings.lost else EXIT_OK


def names_a_network(text: str) -> bool:
    """Whether `hop stats` was given a topology (an existing file, a shipped name, or a
    name ending in .toml, which the loader names if missing) rather than HOST:PORT."""
    return text in SHIPPED or text.endswith(".toml") or Path(text).is_file()


def _network(args: argparse.Namespace) -> tuple[Topology, ClientCredentials]:
    """The topology `hop stats` was given, and the credentials its files name."""
    if args.ca or args.cert or args.key:
        raise BadInput("--ca/--cert/--key are for HOST:PORT; a topology names its TLS files")
    topology = load_study(args.address).topology
    try:
        creds = ClientCredentials.for_network(topology, secret_file(args))
    except (OSError, ValueError, ssl.SSLError) as exc:
        raise BadInput(f"{args.address}: the network's secret or TLS files: {exc}") from None
    return topology, creds


def _network_stats(args: argparse.Namespace) -> int:
    """Every broker's counters, keyed by its id; a broker that does not answer gets its
    reason instead, is named on stderr, and makes the exit code 1 once all were asked."""
    topology, creds = _network(args)
    every: dict[str, Any] = {}
    for broker in sorted(topology.brokers):
        host, port = topology.address(broker)
        try:
            with _stats_session(args, creds, host, port)() as session:
                every[str(broker)] = session.ask()
        except (OSError, ProtocolError) as exc:
            reason = _unanswered(exc)
            every[str(broker)] = {"error": reason}
            logs.say(f"hop stats: broker {broker} at {host_port(host, port)}: {reason}")
    with reader_may_leave(sys.stdout):
        logs.emit(json.dumps(every, indent=2, sort_keys=True))
    return EXIT_FAILURE if any("error" in stats for stats in every.values()) else EXIT_OK


def _watch_stats(args: argparse.Namespace) -> int:
    """`hop stats --every S`: a row of rates per broker every S seconds (client.stats_watch);
    exit 1 when a broker did not answer at some interval."""
    if names_a_network(args.address):
        topology, creds = _network(args)
        places = [(str(b), *topology.address(b)) for b in sorted(topology.brokers)]
    else:
        host, port = address(args.address)
        creds = credentials(args)
        places = [(host_port(host, port), host, port)]

    targets = [Target(label, _stats_session(args, creds, h, p)) for label, h, p in places]
    with reader_may_leave(sys.stdout):
        answered = watch(
            targets, args.every, args.count, sys.stdout, args.name, _unanswered, as_json=args.json
        )
    return EXIT_OK if answered else EXIT_FAILURE


def _stats_session(
    args: argparse.Namespace, creds: ClientCredentials, host: str, port: int
) -> Callable[[], StatsSession]:
    """How `hop stats` connects to the broker at host:port to ask for its counters."""
    return functools.partial(
        StatsSession,
        host,
        port,
        STATS_TIMEOUT_S,
        args.name,
        secret=creds.secret,
        ssl_context=creds.ssl_context,
    )


def _unanswered(exc: Exception) -> str:
    """Why a broker of the network gave no counters, in the words of a single one's."""
    if isinstance(exc, TimeoutError):
        return f"no answer within {STATS_TIMEOUT_S:g} s"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused (is the broker running?)"
    if isinstance(exc, OSError) and exc.strerror and not isinstance(exc, ssl.SSLError):
        return exc.strerror
    return str(exc)


def add_client_options(p: argparse.ArgumentParser) -> None:
    """Authentication and TLS of the manual clients."""
    add_secret_option(
        p, f"a file holding the secret to present (default: ${SECRET_ENV} or ${SECRET_FILE_ENV})"
    )
    p.add_argument("--ca", help="connect with TLS, trusting this CA certificate (PEM)")
    p.add_argument("--cert", help="client certificate (PEM) to present with --ca")
    p.add_argument("--key", help="key of --cert (PEM)")


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    def command(name: str, help: str) -> argparse.ArgumentParser:
        return commands.add_parser(name, help=help, parents=[common])

    p = command("sub", "subscribe and print events as JSON lines")
    p.add_argument("address", help="HOST:PORT of a broker")
    p.add_argument("filters", nargs="+", help='filters, e.g. "family = 7 and price < 120.5"')
    p.add_argument("--name", default=f"hop-sub-{os.getpid()}", help="client name (default: unique)")
    p.add_argument("--count", type=event_count, help="exit after this many events")
    p.add_argument(
        "--reconnect",
        action="store_true",
        help="when the connection is lost, connect again and renew the filters, for as "
        "long as it runs (events published meanwhile are missed); says so on stderr",
    )
    add_client_options(p)
    p.set_defaults(func=cmd_sub)

    p = command("pub", "publish an event given as name=value pairs, or events read as JSON lines")
    p.add_argument("address", help="HOST:PORT of a broker")
    p.add_argument(
        "attributes",
        nargs="+",
        help=f"name=value (int, float, true/false, text); or {STDIN!r}: publish each line "
        "of standard input until its end, a JSON object of attributes (as hop sub prints "
        "them)",
    )
    p.add_argument("--name", default=f"hop-pub-{os.getpid()}", help="client name (default: unique)")
    p.add_argument(
        "--count",
        type=event_count,
        help="publish the name=value event this many times (default 1)",
    )
    p.add_argument(
        "--rate", type=event_rate, help="events per second (default: as fast as possible)"
    )
    add_client_options(p)
    p.set_defaults(func=cmd_pub)

    p = command("stats", "print a broker's counters as JSON, or every broker's of a network")
    p.add_argument(
        "address",
        help=f"HOST:PORT of a broker, or a topology: {FILE_HELP} (every broker's counters, "
        "by id, with the secret and TLS files it names)",
    )
    p.add_argument(
        "--name", default=f"hop-stats-{os.getpid()}", help="client name (default: unique)"
    )
    p.add_argument(
        "--every",
        type=stats_interval,
        metavar="SECONDS",
        help="instead: a table of each broker's rates (events routed, delivered, forwarded "
        "per second, drops, CPU) every SECONDS, until Ctrl-C",
    )
    p.add_argument(
        "--count", type=positive_int, help="with --every: stop after this many intervals"
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="with --every: one JSON object per interval instead of the table, for scripts",
    )
    add_client_options(p)
    p.set_defaults(func=cmd_stats)

    p = command("ping", "time probe events from one broker to another, as a client sees them")
    p.add_argument("address", help="HOST:PORT of the broker the probes are published at")
    p.add_argument(
        "--to", metavar="HOST:PORT", help="the broker they are taken at (default: the same one)"
    )
    p.add_argument(
        "--name",
        default=f"hop-ping-{os.getpid()}",
        help="the clients' names' stem: NAME-pub and NAME-sub (default: unique)",
    )
    p.add_argument("--count", type=positive_int, default=5, help="probes to send (default 5)")
    p.add_argument(
        "--interval", type=positive_number, default=1.0, help="seconds between probes (default 1)"
    )
    p.add_argument(
        "--timeout",
        type=positive_number,
        default=2.0,
        help="seconds a probe may take before it counts as lost (default 2)",
    )
    add_client_options(p)
    p.set_defaults(func=cmd_ping)


LAYER = Layer(
    register,
    bad_input=(BadInput, TopologyError, FilterSyntaxError),
    failures=(ConnectionError, OSError, TimeoutError, ClientError),
)
