"""This checkout's `hop` command as a child process: what the integration tests and
the benchmarks run (they never call `main` in their own process for a whole command,
so a command's signal handlers and exit code are what a user gets)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
HOP = [sys.executable, "-m", "hop"]
"""The `hop` command of this checkout."""


def run_hop(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """Run `hop ARGS...` from the repository root; its output captured as text."""
    return subprocess.run(
        [*HOP, *args], capture_output=True, text=True, timeout=timeout, cwd=REPO, check=False
    )
