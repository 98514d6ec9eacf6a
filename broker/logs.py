"""structlog set-up: key/value lines on a terminal, JSON lines otherwise (to stderr);
and a command's own lines: its messages (`say`, stderr) and its output (`emit`, stdout)."""

from __future__ import annotations

import logging
import sys
from typing import TextIO, cast

import structlog


class _CurrentStderr:
    """Writes to `sys.stderr` as it is at each write, not as it was at `configure`: a
    program (or test) that replaced sys.stderr for a while and closed its stand-in
    would otherwise leave every logger of the process writing to a closed file."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def say(line: str) -> None:
    """Write `line` and its newline to stderr in one write, flushed: a command's
    message for its user. `print(..., file=sys.stderr)` writes the line and then its
    newline, and between the two another process sharing the stderr (`hop net`'s
    brokers do) may write its own line, leaving this one without its end."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


class OutputFailed(Exception):
    """A command's output could not be written (a full disk, a file-size limit)."""


def emit(text: str, out: TextIO | None = None) -> None:
    """Print `text` as a command's output (None: sys.stdout as it is now), flushed;
    OutputFailed saying so when it cannot be written, where the system's reason alone
    would not tell which file failed. A reader that went (BrokenPipeError) is the
    command's to handle."""
    try:
        print(text, file=out, flush=True)
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise OutputFailed(f"cannot write its output: {exc.strerror or exc}") from None


def worth_logging(count: int) -> bool:
    """Whether the `count`th occurrence of a problem that can repeat at will (a client's
    made-up path, events just under the frame limit, a failing accept) is logged: the
    1st, 2nd, 4th, 8th... So the log says what happened and how often, and cannot be
    flooded; the stats count every one."""
    return count & (count - 1) == 0


class RepeatedRecords(logging.Handler):
    """A library's log records as warnings of this process's log: the record's message
    as `reason`, without its traceback, and only the 1st, 2nd, 4th, 8th... of them
    (`worth_logging`), with how many there were (`times`). For a library that logs the
    same failure again each time it retries: trio's accept loop logs every accept that
    fails for want of file descriptors, traceback and all, ten times a second while it
    lasts."""

    def __init__(self, event: str, **context: str) -> None:
        super().__init__()
        self.event = event
        self.context = context
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1
        if worth_logging(self.count):
            structlog.get_logger("hop").warning(
                self.event, reason=record.getMessage(), times=self.count, **self.context
            )


def route_library_log(name: str, event: str, **context: str) -> None:
    """Send the stdlib logger `name`'s records (and only there) to a `RepeatedRecords`."""
    logger = logging.getLogger(name)
    logger.addHandler(RepeatedRecords(event, **context))
    logger.propagate = False


def configure(level: str = "info") -> None:
    """Configure structlog once per process.

    Each record goes out in one write, its newline included (`structlog.WriteLogger`):
    `PrintLogger` prints the line and then its newline, two writes to the stderr that
    `hop net`'s brokers share, so two brokers logging at once could run their records
    together on one line and break the JSON lines apart."""
    renderer: structlog.types.Processor
    if sys.stderr.isatty():
        renderer = structlog.dev.ConsoleRenderer(colors=False)
    else:
        renderer = structlog.processors.JSONRenderer()
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping()[level.upper()]
        ),
        # (the logger only writes and flushes: the stand-in is a TextIO for it)
        logger_factory=structlog.WriteLoggerFactory(file=cast(TextIO, _CurrentStderr())),
        cache_logger_on_first_use=True,
    )
