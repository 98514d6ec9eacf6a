"""This checkout's `hop` command as a child process: what the integration tests and
the benchmarks run (they never call `main` in their own process for a whole command,
so a command's signal handlers and exit code are what a user gets)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from broker.cli import READY_LINE

REPO = Path(__file__).resolve().parent.parent
HOP = [sys.executable, "-m", "hop"]
"""The `hop` command of this checkout."""


def run_hop(*args: str, timeout: float = 30, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    """Run `hop ARGS...` in `cwd` (default: the repository root); its output captured
    as text."""
    return subprocess.run(
        [*HOP, *args], capture_output=True, text=True, timeout=timeout, cwd=cwd, check=False
    )


def start_hop(*args: str) -> subprocess.Popen[str]:
    """Start `hop ARGS...` from the repository root without waiting; its stdout and
    stderr are pipes read as text. The caller stops it (by its PID) and reaps it, with
    SIGINT too: the command starts with SIGINT at its default (`sigint_default`)."""
    return subprocess.Popen(
        [*HOP, *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=sigint_default,
    )


def sigint_default() -> None:
    """SIGINT at its default and no signal blocked, in a child before it runs its
    program (`preexec_fn`), as a terminal starts a command. Where this process inherited
    SIGINT ignored (as a background job of a script does), or blocks it (a command run
    in this process, `broker.process.unwind_on_termination`), the child would inherit that
    too, and a SIGINT sent to stop it would do nothing."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, set())


def stop(proc: subprocess.Popen[str], sig: int = signal.SIGTERM, timeout: float = 20.0) -> None:
    """Stop a `hop` child by its PID: `sig`, then SIGKILL after `timeout` s; reaped, its
    pipes drained."""
    if proc.poll() is None:
        proc.send_signal(sig)
    try:
        proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()


def wait_ready(net: subprocess.Popen[str], timeout: float = 60.0) -> None:
    """Read a `hop net` process's output (text mode) until its ready line: then every
    broker is linked. AssertionError if the line does not come in `timeout` seconds."""
    assert net.stdout is not None
    deadline = time.monotonic() + timeout
    for line in net.stdout:
        if line.strip() == READY_LINE:
            return
        if time.monotonic() > deadline:
            break
    raise AssertionError(f"hop net printed no ready line in {timeout} s")
