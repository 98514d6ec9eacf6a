"""bench.awake: one idle-priority busy loop per CPU, gone when the measurement ends or
its parent dies."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from bench.awake import cpus_kept_awake
from bench.common import REPO
from tests.processes import running, running_after

pytestmark = pytest.mark.needs("sched_idle")


def test_one_spinner_per_cpu_at_idle_priority_stopped_on_exit() -> None:
    cpus = sorted(os.sched_getaffinity(0))
    with cpus_kept_awake() as pids:
        assert len(pids) == len(cpus)
        assert [os.sched_getscheduler(pid) for pid in pids] == [os.SCHED_IDLE] * len(cpus)
        assert [os.sched_getaffinity(pid) for pid in pids] == [{cpu} for cpu in cpus]
    assert all(not os.path.exists(f"/proc/{pid}") for pid in pids)


def test_a_spinner_stops_when_its_parent_is_gone() -> None:
    # The shell starts a spinner in the background, prints its PID, waits for a line
    # on its stdin and exits: the spinner, spinning by then, is left without its parent.
    shell = subprocess.Popen(
        [
            "sh",
            "-c",
            '"$0" -m bench.awake 0 60 $$ >/dev/null 2>&1 & echo $!; read x',
            sys.executable,
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    assert shell.stdout is not None and shell.stdin is not None
    pid = int(shell.stdout.readline())
    try:
        deadline = time.monotonic() + 10.0
        while os.sched_getscheduler(pid) != os.SCHED_IDLE:
            assert time.monotonic() < deadline, "the spinner never started spinning"
            time.sleep(0.01)
        assert running_after([pid], 0.3) == [pid]  # it spins while its parent lives
        shell.communicate("go\n", timeout=10)
        assert running_after([pid], 10.0) == []
    finally:
        if running(pid):
            os.kill(pid, signal.SIGKILL)
        shell.kill()
        shell.wait()
