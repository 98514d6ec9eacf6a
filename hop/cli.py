"""`hop`: one command line over the layers, each contributing its own commands.

broker (`broker`, `net`), client (`sub`, `pub`, `stats`), monitor (`replay`, `analyze`,
`predict`, `report`, `validate`). Exit codes: 0 success, 2 bad input (a message naming
the file, field or argument), 1 failure; an unexpected error is a bug and is shown with
its traceback, exit 1.
"""

from __future__ import annotations

import argparse
import sys

import broker.cli
import client.cli
import monitor.cli

LAYERS = (broker.cli.LAYER, client.cli.LAYER, monitor.cli.LAYER)


def build_parser() -> argparse.ArgumentParser:
    return broker.cli.build(
        "hop", "a content-based event broker network that measures itself", LAYERS
    )


def main(argv: list[str] | None = None) -> int:
    return broker.cli.run(build_parser(), LAYERS, argv)


if __name__ == "__main__":
    sys.exit(main())
