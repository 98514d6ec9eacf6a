"""Logging set-up (broker.logs)."""

from __future__ import annotations

import io
import sys

import pytest
import structlog

from broker import logs


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
