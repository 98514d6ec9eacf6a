"""What /proc says of a process: the fields of its ``stat`` file, read in one place for
the fork server, the replay's host-load sampling, the benchmarks and the tests."""

from __future__ import annotations

from pathlib import Path

PROC = Path("/proc")


def stat_fields(path: str | Path) -> list[bytes] | None:
    """The fields of a /proc/PID/stat file after the command name (field 3, the state,
    onwards: index 1 is the parent's PID, 11 and 12 the user and system CPU ticks);
    None once the process is gone. (The name, in parentheses, may hold spaces and
    parentheses itself, so the fields start after the last ")".)"""
    try:
        with open(path, "rb") as f:
            text = f.read()
    except OSError:
        return None
    return text.rsplit(b")", 1)[1].split()


def process_stat(pid: int) -> list[bytes] | None:
    """`stat_fields` of the process `pid`."""
    return stat_fields(PROC / str(pid) / "stat")
