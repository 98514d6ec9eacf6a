"""The broker layer's part of the `hop` command line: `hop broker` and `hop net`, and
what every layer's commands share (exit codes, the bad-input convention, the runner).

`python -m broker.cli broker FILE --id N` is how a broker process starts (`hop net`,
`hop replay` and the tests start brokers that way): it imports the broker layer and
the ground layers only, never the client library, Spark, pandas or the model.

Exit codes: 0 success, 2 bad input (the user's: a message naming the file, field or
argument), 1 failure (a broker that would not start, a peer that cannot be reached,
and any unexpected error, which is a bug and is shown with its traceback), 130 or 143
for a command that Ctrl-C or SIGTERM interrupted (one line says so, once the command
stopped what it started).
"""

from __future__ import annotations

import argparse
import math
import signal
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from broker import logs
from broker.forkserver import ForkServerError
from broker.groups import holds, sole_exception
from broker.limits import Limits
from broker.netio import host_port
from broker.process import (
    STOPPING_SIGNALS,
    BrokerProcesses,
    StartupError,
    interrupting_signal,
    run_broker,
)
from broker.protocol import DEFAULT_MAX_FRAME
from broker.security import BrokerSecurity, ClientCredentials, read_secret
from broker.server import MAX_MAX_FRAME, MIN_MAX_FRAME, QUEUE_POLICIES, BrokerConfig
from routing import FilterSyntaxError, parse_filter
from topologies import CaseStudy, TopologyError, load_case_study, study_path

EXIT_OK, EXIT_FAILURE, EXIT_BAD_INPUT = 0, 1, 2
EXIT_SIGNAL_BASE = 128
"""A command interrupted by signal N exits 128 + N, as a shell reports a process that
signal ended: 130 for Ctrl-C (SIGINT), 143 for SIGTERM."""

Errors = tuple[type[BaseException], ...]


class BadInput(Exception):
    """Input the user must correct; exit code 2."""


@dataclass(frozen=True)
class Layer:
    """One layer's commands: how to add them to a parser, and which of the exceptions
    they raise are the user's input to correct (exit 2) or expected failures (exit 1,
    a one-line message). Anything else is a bug: exit 1 with its traceback."""

    register: Callable[[Any, argparse.ArgumentParser], None]
    bad_input: Errors = ()
    failures: Errors = ()


def common_options() -> argparse.ArgumentParser:
    """Options every command takes."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning"],
        help="the least level of log lines written to stderr (default info)",
    )
    return common


def build(prog: str, description: str, layers: Sequence[Layer]) -> argparse.ArgumentParser:
    """A parser with the commands of `layers`."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    common = common_options()
    commands = parser.add_subparsers(dest="command", required=True)
    for layer in layers:
        layer.register(commands, common)
    return parser


def run(parser: argparse.ArgumentParser, layers: Sequence[Layer], argv: list[str] | None) -> int:
    """Parse `argv`, run the command it names, and map what it raises to an exit code."""
    args = parser.parse_args(argv)
    logs.configure(args.log_level)
    bad_input: Errors = tuple(e for layer in layers for e in layer.bad_input)
    failures: Errors = tuple(e for layer in layers for e in layer.failures)
    try:
        return int(args.func(args))
    except Exception as exc:
        error = sole_exception(exc)
        if isinstance(error, bad_input):
            logs.say(f"{parser.prog} {args.command}: {one_line(error)}")
            return EXIT_BAD_INPUT
        if isinstance(error, failures):
            logs.say(f"{parser.prog} {args.command}: {one_line(error)}")
            return EXIT_FAILURE
        logs.say(traceback.format_exc().rstrip("\n"))  # (print_exc writes line by line)
        problem = "internal error (a bug, not your input)"
        logs.say(f"{parser.prog} {args.command}: {problem}")
        return EXIT_FAILURE
    except BaseException as exc:
        if not holds(exc, KeyboardInterrupt):
            raise
        return interrupted(f"{parser.prog} {args.command}")


def one_line(error: BaseException) -> str:
    """An error's text as one line: a message may quote what a peer sent (a broker's
    Error, a file's content), line breaks included."""
    return " | ".join(line for line in str(error).splitlines() if line.strip()) or repr(error)


def interrupted(command: str) -> int:
    """Say that `command` was interrupted, by Ctrl-C or SIGTERM; its exit code.

    The command's cleanup (stopping the processes it started) has run by now, as the
    KeyboardInterrupt went through its `finally` clauses. Whatever else failed beside
    the interrupt, in the same exception group (a client process that the terminal's
    Ctrl-C ended too, trio's Cancelled), is its consequence: only the interrupt is told.
    """
    sig = interrupting_signal()
    said = "" if sig == signal.SIGINT else f" ({sig.name})"
    logs.say(f"{command}: interrupted{said}")
    return EXIT_SIGNAL_BASE + sig


def load_study(text: str) -> CaseStudy:
    """A topology or case-study file (or a shipped one's name), its filters parsed
    (TopologyError names the file and field)."""
    return load_case_study(study_path(text), filter_parser=parse_filter)


def secret_file(args: argparse.Namespace) -> Path | None:
    """The --secret-file argument, checked to hold a secret."""
    if args.secret_file is None:
        return None
    path = Path(args.secret_file)
    try:
        read_secret(path)
    except (OSError, ValueError) as exc:
        raise BadInput(f"--secret-file: {exc}") from None
    return path


def add_secret_option(p: argparse.ArgumentParser, help: str) -> None:
    p.add_argument("--secret-file", help=help)


# -- hop broker, hop net ----------------------------------------------------------------


def cmd_broker(args: argparse.Namespace) -> int:
    study = load_study(args.file)
    if args.id not in study.topology.brokers:
        raise BadInput(f"{args.file}: no broker with id {args.id}")
    trace_dir = trace_folder(args)
    config = BrokerConfig(
        max_frame=args.max_frame,
        trace_dir=trace_dir,
        run_id=args.run_id,
        limits=Limits(**{f.name: getattr(args, f.name) for f in fields(Limits)}),
        security=BrokerSecurity.from_topology(study.topology, secret_file(args)),
        **_fault_options(args),
    )
    run_broker(
        study.topology,
        args.id,
        config,
        stop_on_eof=args.stop_on_eof,
        reread=lambda: load_study(args.file).topology,
    )
    return EXIT_OK


def cmd_net(args: argparse.Namespace) -> int:
    """Every broker of the file on this host; ready once every broker is linked to its
    parent and children, so a client started after the ready line loses nothing."""
    study = load_study(args.file)
    topology = study.topology
    _fault_options(args)  # refuse bad values before starting anything
    extra = ["--log-level", args.log_level, *_limit_args(args), *_fault_args(args)]
    if trace_folder(args) is not None:
        extra += ["--trace-dir", args.trace_dir, "--run-id", args.run_id]
    secret = secret_file(args)
    if secret is not None:
        extra += ["--secret-file", str(secret.resolve())]
    credentials = ClientCredentials.for_network(topology, secret)
    procs = BrokerProcesses(study_path(args.file), topology, extra, credentials, forked=True)
    elsewhere = [b for b in sorted(topology.brokers) if not procs.here(b)]
    if elsewhere:
        host = topology.address(elsewhere[0])[0]
        raise BadInput(
            f"{args.file}: hop net runs every broker on this host, but broker {elsewhere[0]}'s "
            f"host {host} is not this one: run `hop broker FILE --id N` on each host "
            "(docs/across-hosts.md), or a replay, which starts brokers on other hosts"
        )
    stop = False

    def on_signal(signum: int, frame: Any) -> None:
        nonlocal stop
        stop = True

    for sig in STOPPING_SIGNALS:  # (the brokers take a hangup too: they stop cleanly)
        signal.signal(sig, on_signal)
    told_gone = False
    try:
        try:
            procs.start()
            procs.wait_listening()
            procs.wait_linked()
        except StartupError:
            if stop:  # asked to stop while starting: the brokers are ending as told
                return EXIT_OK
            raise
        print(f"{topology.name}: {len(topology.brokers)} brokers ({topology.routing} routing)")
        for broker_id in sorted(topology.brokers):
            host, port = topology.address(broker_id)
            parent = topology.brokers[broker_id].parent
            print(f"  broker {broker_id:>3} on {host_port(host, port)}  parent {parent or '-'}")
        print(READY_LINE, flush=True)
        while not stop:
            failed = procs.failed()
            if failed:
                logs.say(f"hop net: brokers exited: {failed}; stopping")
                return EXIT_FAILURE
            if (gone := procs.server_gone()) is not None:
                logs.say(f"hop net: {gone}; stopping its brokers by PID")
                told_gone = True
                return EXIT_FAILURE
            time.sleep(0.2)
        return EXIT_OK
    finally:
        try:
            procs.stop()
        except ForkServerError:  # the server's end, with their codes: said once
            if not told_gone:
                raise


READY_LINE = "Ctrl-C stops all brokers."
"""The last line `hop net` prints once the network is linked: clients may start."""


def trace_folder(args: argparse.Namespace) -> Path | None:
    """The --trace-dir folder, made if need be, or BadInput saying why it cannot be."""
    if not args.trace_dir:
        return None
    path = Path(args.trace_dir)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BadInput(f"--trace-dir: cannot make the folder {path}: {exc.strerror}") from None
    return path


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


def positive_int(text: str) -> int:
    """An argparse type: an integer of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def positive_number(text: str) -> float:
    """An argparse type: a finite number more than 0."""
    return _finite_number(text, zero_ok=False)


def non_negative_number(text: str) -> float:
    """An argparse type: a finite number of 0 or more."""
    return _finite_number(text, zero_ok=True)


def _finite_number(text: str, zero_ok: bool) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok):
        bound = "of 0 or more" if zero_ok else "more than 0"
        raise argparse.ArgumentTypeError(f"must be a finite number {bound}, got {text}")
    return value


def _frame_size(text: str) -> int:
    value = positive_int(text)
    if not MIN_MAX_FRAME <= value <= MAX_MAX_FRAME:
        raise argparse.ArgumentTypeError(
            f"must be {MIN_MAX_FRAME} to {MAX_MAX_FRAME} bytes, got {value}"
        )
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
            type=positive_int,
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


# Fault-handling options of `hop broker` and `hop net`: (flag, BrokerConfig field, type, help)
FAULT_OPTIONS: list[tuple[str, str, Callable[[str], Any], str]] = [
    (
        "--queue-frames",
        "queue_frames",
        positive_int,
        "frames queued per link before its policy applies",
    ),
    ("--queue-policy", "queue_policy", str, "full queue of a client: block (backpressure) or drop"),
    (
        "--stuck-timeout",
        "stuck_timeout_s",
        non_negative_number,
        "cut a link whose writes stall this long (s; 0: never)",
    ),
    ("--heartbeat", "heartbeat_s", non_negative_number, "ping a peer quiet this long (s; 0: off)"),
    (
        "--heartbeat-timeout",
        "heartbeat_timeout_s",
        positive_number,
        "cut a peer silent this long (s)",
    ),
    (
        "--drain-timeout",
        "drain_timeout_s",
        non_negative_number,
        "on SIGTERM, time to send what is queued (s)",
    ),
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
    except ValueError as exc:  # (said with the options' names, not the fields')
        message = str(exc)
        for flag, name, _, _ in sorted(FAULT_OPTIONS, key=lambda o: -len(o[1])):
            message = message.replace(name, flag)
        raise BadInput(message) from None
    return given


def _fault_args(args: argparse.Namespace) -> list[str]:
    """The fault options given, as arguments for `hop broker` (what `hop net` runs)."""
    out = []
    for flag, name, _, _ in FAULT_OPTIONS:
        value = getattr(args, name)
        if value is not None:
            out += [flag, str(value)]
    return out


FILE_HELP = "a topology or case-study file, or a shipped one's name (e.g. tree7)"


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    p = commands.add_parser("broker", help="run one broker of a topology file", parents=[common])
    p.add_argument("file", help=FILE_HELP)
    p.add_argument("--id", type=int, required=True, help="the broker's id in the file")
    p.add_argument(
        "--stop-on-eof",
        action="store_true",
        help="stop (as on SIGTERM) when standard input ends: for brokers started remotely",
    )
    add_trace_options(p)
    add_broker_options(p)
    add_fault_options(p)
    p.set_defaults(func=cmd_broker)

    p = commands.add_parser(
        "net", help="run every broker of a topology on this host", parents=[common]
    )
    p.add_argument("file", help=FILE_HELP)
    add_trace_options(p)
    add_broker_options(p)
    add_fault_options(p)
    p.set_defaults(func=cmd_net)


LAYER = Layer(
    register,
    bad_input=(BadInput, TopologyError, FilterSyntaxError),
    failures=(StartupError, ForkServerError, OSError, logs.OutputFailed),
)


def build_parser() -> argparse.ArgumentParser:
    """The parser of the broker layer's commands alone."""
    return build("hop", "run brokers of a topology", [LAYER])


def main(argv: list[str] | None = None) -> int:
    """`python -m broker.cli broker|net ...`: the broker layer's commands alone."""
    return run(build_parser(), [LAYER], argv)


if __name__ == "__main__":
    sys.exit(main())
