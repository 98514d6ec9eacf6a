"""A benchmark killed with SIGTERM stops the processes it started (its brokers, and
their trace writers) instead of leaving them running (`broker.process.unwind_on_termination`)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from broker.local_network import REPO
from tests.processes import children, running, running_after

pytestmark = pytest.mark.integration


@pytest.mark.needs("procfs")
def test_sigterm_stops_the_brokers_a_benchmark_started() -> None:
    # Far more pairs than it could finish: it is stopped long before writing a result.
    bench = subprocess.Popen(
        [sys.executable, "-m", "bench.tracing_overhead", "--events", "20000"]
        + ["--rounds", "1", "--pairs", "1000"],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    started: list[int] = []
    try:
        deadline = time.monotonic() + 60
        brokers: list[int] = []
        while len(brokers) < 2 and time.monotonic() < deadline:  # one traced, one not
            brokers = children(bench.pid)
            time.sleep(0.1)
        assert len(brokers) == 2, f"the benchmark started {len(brokers)} brokers, not 2"
        writers: list[int] = []
        while not writers and time.monotonic() < deadline:  # the traced one's writer
            writers = [w for broker in brokers for w in children(broker)]
            time.sleep(0.1)
        started = brokers + writers
        assert writers, "the traced broker started no trace writer"
        time.sleep(1.0)  # into the measured segments
        bench.send_signal(signal.SIGTERM)
        bench.wait(60)
        assert running_after(started, 30) == []
    finally:
        for pid in [bench.pid, *started]:
            if running(pid):
                os.kill(pid, signal.SIGKILL)
        bench.wait(10)
