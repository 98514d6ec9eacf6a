"""The `hop` command line (DESIGN 3.3).

Exit codes: 0 success, 2 bad input (a message naming the file, field or argument),
1 failure.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import ssl
import sys
import time
from dataclasses import fields
from pathlib import Path
from typing import Any

import trio

from broker import logs
from broker.limits import Limits
from broker.process import BrokerProcesses, StartupError, run_broker, unwind_on_sigterm
from broker.protocol import DEFAULT_MAX_FRAME
from broker.security import (
    SECRET_ENV,
    SECRET_FILE_ENV,
    BrokerSecurity,
    ClientCredentials,
    client_ssl_context,
    read_secret,
    secret_from_env,
)
from broker.server import QUEUE_POLICIES, BrokerConfig
from client.aio import ClientError
from monitor.validate import CALIBRATION_FRACTIONS
from routing import FilterSyntaxError, parse_filter
from topologies import TopologyError, load_case_study

EXIT_OK, EXIT_FAILURE, EXIT_BAD_INPUT = 0, 1, 2


class BadInput(Exception):
    """Input the user must correct; exit code 2."""


def _address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise BadInput(f"expected HOST:PORT, got {text!r}")
    return host, int(port)


def _value(text: str) -> Any:
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


def _attributes(pairs: list[str]) -> dict[str, Any]:
    out = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise BadInput(f"expected name=value, got {pair!r}")
        out[name] = _value(value)
    return out


def _load(path: str) -> Any:
    return load_case_study(Path(path), filter_parser=parse_filter)


# -- commands ---------------------------------------------------------------------------


def _secret_file(args: argparse.Namespace) -> Path | None:
    """The --secret-file argument, checked to hold a secret."""
    if args.secret_file is None:
        return None
    path = Path(args.secret_file)
    try:
        read_secret(path)
    except (OSError, ValueError) as exc:
        raise BadInput(f"--secret-file: {exc}") from None
    return path


def cmd_broker(args: argparse.Namespace) -> int:
    study = _load(args.file)
    if args.id not in study.topology.brokers:
        raise BadInput(f"{args.file}: no broker with id {args.id}")
    trace_dir = Path(args.trace_dir) if args.trace_dir else None
    config = BrokerConfig(
        max_frame=args.max_frame,
        trace_dir=trace_dir,
        run_id=args.run_id,
        limits=Limits(**{f.name: getattr(args, f.name) for f in fields(Limits)}),
        security=BrokerSecurity.from_topology(study.topology, _secret_file(args)),
        **_fault_options(args),
    )
    run_broker(study.topology, args.id, config)
    return EXIT_OK


def cmd_net(args: argparse.Namespace) -> int:
    study = _load(args.file)
    topology = study.topology
    _fault_options(args)  # refuse bad values before starting anything
    extra = ["--log-level", args.log_level, *_limit_args(args), *_fault_args(args)]
    if args.trace_dir:
        extra += ["--trace-dir", args.trace_dir, "--run-id", args.run_id]
    secret_file = _secret_file(args)
    if secret_file is not None:
        extra += ["--secret-file", str(secret_file.resolve())]
    credentials = ClientCredentials.for_network(topology, secret_file)
    procs = BrokerProcesses(Path(args.file), topology, extra, credentials)
    stop = False

    def on_signal(signum: int, frame: Any) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        procs.start()
        procs.wait_listening()
        print(f"{topology.name}: {len(topology.brokers)} brokers ({topology.routing} routing)")
        for broker_id in sorted(topology.brokers):
            host, port = topology.address(broker_id)
            parent = topology.brokers[broker_id].parent
            print(f"  broker {broker_id:>3} on {host}:{port}  parent {parent or '-'}")
        print("Ctrl-C stops all brokers.", flush=True)
        while not stop:
            failed = procs.failed()
            if failed:
                print(f"hop net: brokers exited: {failed}; stopping", file=sys.stderr)
                return EXIT_FAILURE
            time.sleep(0.2)
        return EXIT_OK
    except StartupError as exc:
        print(f"hop net: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    finally:
        procs.stop()


def _client_credentials(args: argparse.Namespace) -> ClientCredentials:
    """A client command's secret (--secret-file, else the environment) and TLS context."""
    secret_file = _secret_file(args)
    secret = read_secret(secret_file) if secret_file else secret_from_env()
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
    filters = [parse_filter(text) for text in args.filters]
    host, port = _address(args.address)
    creds = _client_credentials(args)
    with contextlib.suppress(KeyboardInterrupt):
        trio.run(_subscribe_and_print, host, port, args.name, filters, args.count, creds)
    return EXIT_OK


async def _subscribe_and_print(
    host: str,
    port: int,
    name: str,
    filters: list[Any],
    count: int | None,
    creds: ClientCredentials,
) -> None:
    """Several filters are a disjunction: print each event once, whichever matched."""
    import client

    async with client.open_client(
        host, port, name=name, secret=creds.secret, ssl_context=creds.ssl_context
    ) as c:
        subs = [await c.subscribe(f) for f in filters]
        print(f"subscribed to {len(subs)} filter(s) at {host}:{port}", file=sys.stderr)
        send, receive = trio.open_memory_channel[Any](0)
        async with trio.open_nursery() as nursery:
            for sub in subs:
                nursery.start_soon(_pump, sub, send.clone())
            seen: set[str] = set()
            printed = 0
            async for delivery in receive:
                if delivery.event_id in seen:
                    continue
                seen.add(delivery.event_id)
                print(json.dumps(_printable(delivery.attributes), sort_keys=True), flush=True)
                printed += 1
                if count is not None and printed >= count:
                    nursery.cancel_scope.cancel()


async def _pump(sub: Any, send: trio.MemorySendChannel[Any]) -> None:
    async with send:
        while True:
            await send.send(await sub.next_delivery())


def _printable(attributes: dict[str, Any]) -> dict[str, Any]:
    return {k: (v.hex() if isinstance(v, bytes) else v) for k, v in attributes.items()}


def cmd_pub(args: argparse.Namespace) -> int:
    import client

    attributes = _attributes(args.attributes)
    host, port = _address(args.address)
    creds = _client_credentials(args)
    with client.Client.connect(
        host, port, name=args.name, secret=creds.secret, ssl_context=creds.ssl_context
    ) as c:
        for i in range(args.count):
            c.publish(attributes)
            if args.rate and i + 1 < args.count:
                time.sleep(1.0 / args.rate)
        c.flush()
    print(f"published {args.count} event(s) to {host}:{port}", file=sys.stderr)
    return EXIT_OK


def cmd_stats(args: argparse.Namespace) -> int:
    import client

    host, port = _address(args.address)
    creds = _client_credentials(args)
    with client.Client.connect(
        host, port, name=args.name, secret=creds.secret, ssl_context=creds.ssl_context
    ) as c:
        print(json.dumps(c.stats(), indent=2, sort_keys=True))
    return EXIT_OK


def cmd_replay(args: argparse.Namespace) -> int:
    from monitor.replay import ReplayError, replay
    from monitor.traces import TraceError

    try:
        result = replay(
            Path(args.file),
            Path(args.out),
            scenario=args.scenario,
            duration_s=args.duration,
            warmup_s=args.warmup,
            quiet=args.quiet,
            rate_scale=args.rate_scale,
        )
    except (ReplayError, TraceError) as exc:
        print(f"hop replay: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    c = result.counts
    print(
        f"{result.run_id}: published {c.published}, delivered {c.delivered} "
        f"of {c.expected_deliveries} expected, lost {c.lost}, unexpected {c.unexpected}"
    )
    print(f"traces and manifest in {result.run_dir}")
    if c.lost or c.unexpected:
        for example in c.lost_examples:
            print(f"  lost: {example}", file=sys.stderr)
        return EXIT_FAILURE
    return EXIT_OK


def cmd_analyze(args: argparse.Namespace) -> int:
    from monitor.analysis import analyze

    summary = analyze(Path(args.run_dir), master=args.master, window=args.window)
    print(json.dumps(summary, indent=2, default=str))
    return EXIT_OK


def cmd_predict(args: argparse.Namespace) -> int:
    from monitor.predict import METHODS, predict

    methods = METHODS if args.method == "all" else (args.method,)
    workload = Path(args.workload) if args.workload else None
    summary = predict(
        Path(args.run_dir),
        workload,
        args.scenario,
        args.rate_scale,
        methods,
        measured_rates=args.measured_rates,
        warm=not args.as_measured,
        other_runs=[Path(run) for run in args.other_runs],
    )
    print(json.dumps(summary, indent=2, default=str))
    return EXIT_OK


def cmd_report(args: argparse.Namespace) -> int:
    from monitor.report import render

    html_path, md_path, sentence = render(Path(args.run_dir))
    print(sentence)
    print(f"{html_path}\n{md_path}")
    return EXIT_OK


def cmd_validate(args: argparse.Namespace) -> int:
    from monitor.validate import validate

    result = validate(
        Path(args.file),
        Path(args.out),
        scenario=args.scenario,
        duration_s=args.duration,
        quick=args.quick,
        load_scale=args.load_scale,
        calibration_fractions=args.calibration_fractions,
        calibration_repeats=args.calibration_repeats,
        master=args.master,
        quiet=args.quiet,
    )
    print(result.summary)
    print(f"report: {result.report_html} ({result.seconds:.0f} s)")
    return EXIT_OK


# -- parser -----------------------------------------------------------------------------


def add_trace_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--trace-dir", help="record a trace row per routed event into this folder (off by default)"
    )
    p.add_argument("--run-id", default="adhoc", help="run id written into the traces")


_LIMIT_HELP = {
    "max_attributes": "attributes per event",
    "max_name_len": "characters per attribute name (events and filters)",
    "max_value_len": "characters per string, bytes per bytes value (events and filters)",
    "max_constraints": "constraints per filter",
    "max_subscriptions": "subscriptions per client connection",
}


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _frame_size(text: str) -> int:
    value = _positive_int(text)
    if value > 2**32 - 1:
        raise argparse.ArgumentTypeError(f"must be at most {2**32 - 1}, got {value}")
    return value


def add_broker_options(p: argparse.ArgumentParser) -> None:
    """Limits on what clients send, and the network secret."""
    p.add_argument(
        "--max-frame",
        type=_frame_size,
        default=DEFAULT_MAX_FRAME,
        help=f"bytes per message frame (default {DEFAULT_MAX_FRAME})",
    )
    defaults = Limits()
    for f in fields(Limits):
        default = getattr(defaults, f.name)
        p.add_argument(
            "--" + f.name.replace("_", "-"),
            type=_positive_int,
            default=default,
            help=f"limit: {_LIMIT_HELP[f.name]} (default {default})",
        )
    add_secret_option(p, "the network secret (overrides the topology's auth_secret_file)")


def _limit_args(args: argparse.Namespace) -> list[str]:
    """The limit options of `hop net`, to pass on to each `hop broker`."""
    out = ["--max-frame", str(args.max_frame)]
    for f in fields(Limits):
        out += ["--" + f.name.replace("_", "-"), str(getattr(args, f.name))]
    return out


def add_secret_option(p: argparse.ArgumentParser, help: str) -> None:
    p.add_argument("--secret-file", help=help)


def add_client_options(p: argparse.ArgumentParser) -> None:
    """Authentication and TLS of the manual clients."""
    add_secret_option(
        p, f"a file holding the secret to present (default: ${SECRET_ENV} or ${SECRET_FILE_ENV})"
    )
    p.add_argument("--ca", help="connect with TLS, trusting this CA certificate (PEM)")
    p.add_argument("--cert", help="client certificate (PEM) to present with --ca")
    p.add_argument("--key", help="key of --cert (PEM)")


# Fault-handling options of `hop broker` and `hop net`: (flag, BrokerConfig field, type, help)
FAULT_OPTIONS = [
    ("--queue-frames", "queue_frames", int, "frames queued per link before its policy applies"),
    ("--queue-policy", "queue_policy", str, "full queue of a client: block (backpressure) or drop"),
    ("--stuck-timeout", "stuck_timeout_s", float, "cut a link whose writes stall this long (s)"),
    ("--heartbeat", "heartbeat_s", float, "ping a peer quiet this long (s; 0: off)"),
    ("--heartbeat-timeout", "heartbeat_timeout_s", float, "cut a peer silent this long (s)"),
    ("--drain-timeout", "drain_timeout_s", float, "on SIGTERM, time to send what is queued (s)"),
]


def add_fault_options(p: argparse.ArgumentParser) -> None:
    defaults = BrokerConfig()
    for flag, name, kind, help in FAULT_OPTIONS:
        choices = QUEUE_POLICIES if name == "queue_policy" else None
        default = getattr(defaults, name)
        p.add_argument(
            flag, dest=name, type=kind, choices=choices, help=f"{help} (default {default})"
        )


def _fault_options(args: argparse.Namespace) -> dict[str, Any]:
    """The fault options given on the command line, as BrokerConfig fields."""
    given = {name: getattr(args, name) for _, name, _, _ in FAULT_OPTIONS}
    given = {name: value for name, value in given.items() if value is not None}
    try:
        BrokerConfig(**given)
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    return given


def _fault_args(args: argparse.Namespace) -> list[str]:
    """The fault options given, as arguments for `hop broker` (what `hop net` runs)."""
    out = []
    for flag, name, _, _ in FAULT_OPTIONS:
        value = getattr(args, name)
        if value is not None:
            out += [flag, str(value)]
    return out


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hop", description=__doc__.splitlines()[0])
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--log-level", default="info", choices=["debug", "info", "warning"])
    commands = parser.add_subparsers(dest="command", required=True)

    def command(name: str, help: str) -> argparse.ArgumentParser:
        return commands.add_parser(name, help=help, parents=[common])

    p = command("broker", "run one broker of a topology file")
    p.add_argument("file")
    p.add_argument("--id", type=int, required=True, help="the broker's id in the file")
    add_trace_options(p)
    add_broker_options(p)
    add_fault_options(p)
    p.set_defaults(func=cmd_broker)

    p = command("net", "run every broker of a topology on this host")
    p.add_argument("file")
    add_trace_options(p)
    add_broker_options(p)
    add_fault_options(p)
    p.set_defaults(func=cmd_net)

    p = command("replay", "run a case study's workload and record traces into RUN_DIR")
    p.add_argument("file", help="a case-study file (topology + workload)")
    p.add_argument("--out", required=True, help="RUN_DIR (must not hold traces yet)")
    p.add_argument("--scenario", help="a [[scenarios]] name of the file")
    p.add_argument("--duration", type=float, help="measurement seconds (default: the file's)")
    p.add_argument("--warmup", type=float, help="warm-up seconds (default: the file's)")
    p.add_argument("--quiet", action="store_true", help="no progress line")
    p.add_argument("--rate-scale", type=float, default=1.0, help="multiply every rate")
    p.set_defaults(func=cmd_replay)

    p = command("analyze", "Spark jobs over RUN_DIR's traces -> RUN_DIR/analysis/")
    p.add_argument("run_dir")
    p.add_argument("--master", help="Spark master URL (default: local[*])")
    p.add_argument("--window", choices=["measure", "all"], default="measure")
    p.set_defaults(func=cmd_analyze)

    p = command("predict", "model predictions for RUN_DIR -> RUN_DIR/analysis/")
    p.add_argument("run_dir")
    p.add_argument("--workload", help="case-study file with the target rates")
    p.add_argument("--scenario", help="scenario of the workload file")
    p.add_argument("--rate-scale", type=float, default=1.0, help="multiply every target rate")
    p.add_argument("--method", choices=["mm1", "mm1-ps", "sim", "all"], default="all")
    p.add_argument(
        "--measured-rates",
        action="store_true",
        help="start from the rates the run's publishers reached, not the nominal ones",
    )
    p.add_argument(
        "--as-measured",
        action="store_true",
        help="use service times and delays as measured, not reweighted for the target rates",
    )
    p.add_argument(
        "--other-runs",
        nargs="+",
        default=[],
        metavar="RUN_DIR2",
        help="runs of the same workload, at least one at another rate: each stage's cost "
        "is carried to the target along its line in the host's busy share through the "
        "runs, and runs at one rate are pooled (monitor.carry)",
    )
    p.set_defaults(func=cmd_predict)

    p = command("report", "RUN_DIR/report.html and report.md")
    p.add_argument("run_dir")
    p.set_defaults(func=cmd_report)

    p = command("validate", "replay + analyze + predict + report")
    p.add_argument("file", help="a case-study file")
    p.add_argument("--out", required=True, help="RUN_DIR")
    p.add_argument("--scenario")
    p.add_argument("--duration", type=float, help="measured seconds of each replay")
    p.add_argument("--quick", action="store_true", help="short phases (a smoke run)")
    p.add_argument("--load-scale", type=float, default=1.0, help="multiply the target rates")
    p.add_argument(
        "--calibration-fractions",
        type=float,
        nargs="+",
        default=list(CALIBRATION_FRACTIONS),
        metavar="F",
        help="calibration loads as fractions of the target, one replay each (default "
        f"{' '.join(f'{f:g}' for f in CALIBRATION_FRACTIONS)}); with two or more, each cost "
        "is carried to the target along its line in the host's busy share (monitor.carry)",
    )
    p.add_argument(
        "--calibration-repeats",
        type=int,
        default=1,
        metavar="N",
        help="replays at each calibration fraction, pooled (default 1)",
    )
    p.add_argument("--master", help="Spark master URL (default: local[*])")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=cmd_validate)

    p = command("sub", "subscribe and print events as JSON lines")
    p.add_argument("address", help="HOST:PORT of a broker")
    p.add_argument("filters", nargs="+", help='filters, e.g. "family = 7 and price < 120.5"')
    p.add_argument("--name", default=f"hop-sub-{os.getpid()}", help="client name (default: unique)")
    p.add_argument("--count", type=int, help="exit after this many events")
    add_client_options(p)
    p.set_defaults(func=cmd_sub)

    p = command("pub", "publish an event given as name=value pairs")
    p.add_argument("address", help="HOST:PORT of a broker")
    p.add_argument("attributes", nargs="+", help="name=value (int, float, true/false, text)")
    p.add_argument("--name", default=f"hop-pub-{os.getpid()}", help="client name (default: unique)")
    p.add_argument("--count", type=int, default=1)
    p.add_argument("--rate", type=float, help="events per second (default: as fast as possible)")
    add_client_options(p)
    p.set_defaults(func=cmd_pub)

    p = command("stats", "print a broker's counters as JSON")
    p.add_argument("address", help="HOST:PORT of a broker")
    p.add_argument(
        "--name", default=f"hop-stats-{os.getpid()}", help="client name (default: unique)"
    )
    add_client_options(p)
    p.set_defaults(func=cmd_stats)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logs.configure(args.log_level)
    if args.command in ("replay", "validate"):
        unwind_on_sigterm()  # so the brokers these commands started are stopped
    try:
        return args.func(args)
    except (BadInput, TopologyError, FilterSyntaxError) as exc:
        print(f"hop {args.command}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except ValueError as exc:  # TraceError, ReportError and the model's input checks
        print(f"hop {args.command}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except StartupError as exc:
        print(f"hop {args.command}: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    except (ConnectionError, OSError, TimeoutError, ClientError) as exc:
        print(f"hop {args.command}: {exc}", file=sys.stderr)
        return EXIT_FAILURE


if __name__ == "__main__":
    sys.exit(main())
