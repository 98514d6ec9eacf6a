"""What the tests read of processes they started, from /proc: parents, children,
command lines, and whether one still runs; and waiting for what they serve. A test
checks by PID that everything it started has ended, never by name."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from broker.forkserver import alive
from broker.procfs import process_stat

running = alive
"""Whether `pid` is a process that has not exited (a zombie has)."""


def running_after(pids: list[int], seconds: float) -> list[int]:
    """The `pids` still running after waiting up to `seconds` for them to end."""
    deadline = time.monotonic() + seconds
    while (left := [pid for pid in pids if running(pid)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def parent_of(pid: int) -> int | None:
    fields = process_stat(pid)
    return None if fields is None else int(fields[1])


def cmdline(pid: int) -> str:
    """Its command line, words joined by spaces ("" once it is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ")
    except OSError:
        return ""


def children(pid: int) -> list[int]:
    """Its children, those of every thread."""
    out = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out += [int(child) for child in (task / "children").read_text().split()]
        except OSError:
            continue
    return out


def descendants(pid: int) -> list[int]:
    """Its children, theirs, and so on."""
    out: list[int] = []
    todo = [pid]
    while todo:
        for child in children(todo.pop()):
            out.append(child)
            todo.append(child)
    return out


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    """Poll `condition()` until it is true; an OSError from it means not yet (a broker
    not listening yet). AssertionError naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if condition():
                return
        except OSError:
            pass
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        time.sleep(0.05)
