"""The monitor layer's errors, in a module of their own so that the command line knows
them without loading the commands: `InputError`, the input is wrong (a run folder, a
workload file or an option's value the user can correct: `hop` exits 2 and names it);
`ReplayError`, a replay could not run, `SparkStartError`, Spark could not start, and
`OutputError`, a file of the output could not be written (exit 1). Any other exception
from this layer is a failure or a bug, never blamed on the user's input."""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterator
from pathlib import Path


class InputError(ValueError):
    """Input the user can correct; the message names the file, folder or option."""


class ReplayError(RuntimeError):
    """The replay could not run (bad RUN_DIR, brokers that did not start, ...)."""


class SparkStartError(RuntimeError):
    """Spark could not start: a master that cannot be reached, a driver JVM that exits."""


class OutputError(OSError):
    """A file of the command's output could not be written (a full disk); the message
    names the file and the system's reason."""


@contextlib.contextmanager
def writing(path: Path) -> Iterator[None]:
    """An OSError raised inside, as an OutputError naming `path`: Python's, pyarrow's
    and Spark's errors of a write (`monitor.spark.jvm_io_failure`) do not name the file."""
    try:
        yield
    except OutputError:
        raise
    except OSError as exc:
        reason = os.strerror(exc.errno) if exc.errno else str(exc)  # (pyarrow's is wordy)
        raise OutputError(f"{path}: cannot write it ({reason})") from None


def write_output(path: Path, text: str) -> None:
    """Write `text` to the output file `path`; OutputError naming it when it cannot be
    written."""
    with writing(path):
        path.write_text(text)


def check_number(value: float, what: str, *, positive: bool = False) -> float:
    """``value`` if it is finite and at least 0 (more than 0 if ``positive``), else an
    InputError naming ``what`` (as the user wrote it: an option, a setting)."""
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        bound = "more than 0" if positive else "at least 0"
        raise InputError(f"{what} must be a finite number {bound}, got {value}")
    return value


def made_folder(path: Path, what: str) -> Path:
    """``path`` made a folder (with its parents) if it is not one; InputError naming
    ``what`` (the option that gave it) when it cannot be: a file in the way, no
    permission."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"{what}: cannot make the folder {path}: {exc.strerror or exc}") from None
    return path
