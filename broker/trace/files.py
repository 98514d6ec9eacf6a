"""Where a process writes its trace files. Kept apart from the recorders so that a
broker, which names its `hops` file here but leaves the Arrow work to its writer
process, does not import pyarrow and numpy (~0.1 s of every broker's start)."""

from __future__ import annotations

import os
from pathlib import Path


def trace_path(trace_dir: Path, table: str, owner: str) -> Path:
    """RUN_DIR/traces/TABLE-OWNER-PID.arrow (a restarted process gets a new file)."""
    return trace_dir / f"{table}-{owner}-{os.getpid()}.arrow"


def trace_owner(path: Path) -> str:
    """The OWNER of a file named by `trace_path` (`broker3`, `clients-b8`)."""
    return path.name.removesuffix(".arrow").split("-", 1)[1].rsplit("-", 1)[0]
