"""`hop`: one command line over the layers, each contributing its own commands.

broker (`broker`, `net`), client (`sub`, `pub`, `stats`), monitor (`replay`, `analyze`,
`predict`, `report`, `validate`). Exit codes: 0 success, 2 bad input (a message naming
the file, field or argument), 1 failure; an unexpected error is a bug and is shown with
its traceback, exit 1; 130 (Ctrl-C) or 143 (SIGTERM) for an interrupted command, once it
stopped what it started.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

import broker.cli
import client.cli
import monitor.cli
from broker.protocol import PROTOCOL_VERSION

LAYERS = (broker.cli.LAYER, client.cli.LAYER, monitor.cli.LAYER)
DISTRIBUTION = "hop-broker"


def version_text() -> str:
    """What ``hop --version`` prints: the package's version, and the versions of the
    wire protocol and of the trace files, which must agree across a network's hosts
    (brokers refuse a peer of another protocol; analysis, traces of another schema)."""
    # Imported here: the package metadata and the trace schema (pyarrow) are this
    # option's only use of them, and every other command starts faster without.
    from importlib import metadata

    from broker.trace.schema import TRACE_VERSION

    try:
        package = metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:  # run from a checkout that is not installed
        package = "(not installed)"
    return f"hop {package} (protocol {PROTOCOL_VERSION}, trace schema {TRACE_VERSION})"


class VersionAction(argparse.Action):
    """``--version``: print `version_text()` and exit, working it out only then."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, help="show the versions and exit")

    def __call__(self, parser: argparse.ArgumentParser, *args: object) -> NoReturn:
        print(version_text())
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = broker.cli.build(
        "hop", "a content-based event broker network that measures itself", LAYERS
    )
    parser.add_argument("--version", action=VersionAction)
    return parser


def main(argv: list[str] | None = None) -> int:
    return broker.cli.run(build_parser(), LAYERS, argv)


if __name__ == "__main__":
    sys.exit(main())
