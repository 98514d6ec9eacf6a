"""Logging set-up (broker.logs)."""

from __future__ import annotations

import argparse
import errno
import io
import json
import os
import sys
from typing import Any

import pytest
import structlog

from broker import logs
from broker.cli import EXIT_FAILURE, Layer, build, run


def test_loggers_write_to_the_stderr_of_the_moment(monkeypatch: pytest.MonkeyPatch) -> None:
    """`hop` configures logging once per process; a stderr replaced at that time and
    closed since (as pytest's capture does between tests) must not break later logs."""
    first = io.StringIO()
    monkeypatch.setattr(sys, "stderr", first)
    logs.configure("info")
    log = structlog.get_logger("test.logs")
    log.info("early")
    first.close()
    second = io.StringIO()
    monkeypatch.setattr(sys, "stderr", second)
    log.info("late", n=1)
    structlog.get_logger("test.other").warning("another")
    assert '"event": "late"' in second.getvalue()
    assert '"event": "another"' in second.getvalue()


class _Writes(io.StringIO):
    """A stderr stand-in that keeps each write call apart."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def write(self, text: str) -> int:
        self.calls.append(text)
        return super().write(text)


def test_each_record_is_one_write_with_its_newline(monkeypatch: pytest.MonkeyPatch) -> None:
    """Brokers started by `hop net` share one stderr: a record written in two parts
    (the line, then its newline) could be run together with another broker's."""
    stand_in = _Writes()
    monkeypatch.setattr(sys, "stderr", stand_in)
    logs.configure("info")
    log = structlog.get_logger("test.logs.writes")
    log.info("first", broker="5")
    log.warning("second", broker="6")
    assert len(stand_in.calls) == 2, stand_in.calls
    for call in stand_in.calls:
        assert call.endswith("\n") and call.count("\n") == 1, call
        assert json.loads(call)["broker"] in {"5", "6"}


def test_a_commands_message_is_one_write_with_its_newline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A broker that cannot listen says so on the stderr it shares with `hop net`'s
    other brokers: the line and its newline must go out together, or another broker's
    record may land between them."""

    def register(commands: Any, common: argparse.ArgumentParser) -> None:
        def fail(args: argparse.Namespace) -> int:
            raise ConnectionRefusedError("broker 3: cannot listen on 127.0.0.1:9: in use")

        commands.add_parser("fail", parents=[common]).set_defaults(func=fail)

    layers = [Layer(register, failures=(ConnectionError,))]
    parser = build("hop", "test", layers)
    stand_in = _Writes()
    monkeypatch.setattr(sys, "stderr", stand_in)
    assert run(parser, layers, ["fail"]) == EXIT_FAILURE
    assert stand_in.calls == ["hop fail: broker 3: cannot listen on 127.0.0.1:9: in use\n"]


def test_a_bugs_traceback_is_one_write(monkeypatch: pytest.MonkeyPatch) -> None:
    """A command that fails with a bug writes its traceback whole, then its one-line
    verdict: `traceback.print_exc` writes line by line, and another broker sharing
    the stderr could put its record among the lines."""

    def register(commands: Any, common: argparse.ArgumentParser) -> None:
        def fail(args: argparse.Namespace) -> int:
            raise KeyError("no such thing")

        commands.add_parser("fail", parents=[common]).set_defaults(func=fail)

    layers = [Layer(register)]
    parser = build("hop", "test", layers)
    stand_in = _Writes()
    monkeypatch.setattr(sys, "stderr", stand_in)
    assert run(parser, layers, ["fail"]) == EXIT_FAILURE
    traceback_text, verdict = stand_in.calls
    assert traceback_text.startswith("Traceback (most recent call last):\n")
    assert traceback_text.endswith("KeyError: 'no such thing'\n")
    assert verdict == "hop fail: internal error (a bug, not your input)\n"


def test_a_commands_output_that_cannot_be_written_is_said_so() -> None:
    class FullDisk(io.StringIO):
        def write(self, text: str) -> int:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    written = io.StringIO()
    logs.emit("line", written)
    assert written.getvalue() == "line\n"
    with pytest.raises(
        logs.OutputFailed, match="^cannot write its output: No space left on device$"
    ):
        logs.emit("line", FullDisk())
    with pytest.raises(BrokenPipeError):  # the command's to handle: its reader went
        logs.emit("line", _Gone())


class _Gone(io.StringIO):
    def write(self, text: str) -> int:
        raise BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))
