"""The composed `hop` command line: the commands of every layer under one name."""

import sys


def main() -> int:
    """The `hop` script. A Ctrl-C while the command line's modules are still being
    imported (its first fifth of a second or so, before any command has started
    anything) ends it as a Ctrl-C at any later moment does: one line, exit 130."""
    try:
        from hop.cli import main as run
    except KeyboardInterrupt:
        print("hop: interrupted", file=sys.stderr)
        return 130
    return run()
