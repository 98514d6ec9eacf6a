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

pytestmark = pytest.mark.needs("sched_idle")


def _gone(pid: int, timeout_s: float) -> bool:
    """Whether process `pid` ends (or is a zombie) within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


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
        assert not _gone(pid, timeout_s=0.3)  # it spins while its parent lives
        shell.communicate("go\n", timeout=10)
        assert _gone(pid, timeout_s=10.0)
    finally:
        if not _gone(pid, timeout_s=0.0):
            os.kill(pid, signal.SIGKILL)
        shell.kill()
        shell.wait()
