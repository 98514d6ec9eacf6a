"""The `hop` command of this checkout, as the end-to-end tests start it.

`HOP` is the one place that says how: every test that runs `hop` as a process of its
own builds its command line from it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
HOP = [sys.executable, "-m", "broker.cli"]


def hop(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run `hop ARGS...` from the repository root and wait; its output captured as text."""
    return subprocess.run(
        [*HOP, *args], capture_output=True, text=True, timeout=timeout, cwd=REPO, check=False
    )


def start_hop(*args: str) -> subprocess.Popen[str]:
    """Start `hop ARGS...` from the repository root without waiting; its stdout and
    stderr are pipes read as text. The caller stops it (by its PID) and reaps it."""
    return subprocess.Popen(
        [*HOP, *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
