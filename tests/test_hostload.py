"""Other load on the host, on real processes: a busy process the test starts counts
as the run's own when it descends from the run's root and as other load when it does
not, and a replay run beside one is marked disturbed in its manifest."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from monitor.hostload import HostLoad, tree_cpu_seconds
from tests.test_replay import run_replay, small_study

BUSY = "while True: pass"


@pytest.fixture
def busy() -> Iterator[subprocess.Popen[bytes]]:
    """A process spinning on one core, stopped by its PID afterwards."""
    proc = subprocess.Popen([sys.executable, "-c", BUSY])
    try:
        yield proc
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()


def test_a_busy_process_is_the_run_own_load_or_other_load_by_descent(
    busy: subprocess.Popen[bytes],
) -> None:
    bystander = subprocess.Popen(["sleep", "30"])  # a root the busy process is not under
    try:
        busy_before = tree_cpu_seconds(busy.pid)
        with (
            HostLoad(root=os.getpid(), interval_s=0.2) as mine,
            HostLoad(root=bystander.pid, interval_s=0.2) as theirs,
        ):
            start = time.time_ns()
            time.sleep(2.0)
            end = time.time_ns()
        busy_cores = (tree_cpu_seconds(busy.pid) - busy_before) / ((end - start) / 1e9)
    finally:
        os.kill(bystander.pid, signal.SIGKILL)
        bystander.wait()
    assert busy_cores > 0.05, "the busy process did not get the CPU at all"
    inside = mine.record({"measure": (start, end)})["phases"]["measure"]
    outside = theirs.record({"measure": (start, end)})
    phase = outside["phases"]["measure"]
    # Under the test process, the busy child is the run's own CPU...
    assert inside["run_cores"] >= 0.7 * busy_cores
    # ... under a sleeping root it is other load, and marks the run disturbed.
    assert phase["run_cores"] < 0.05
    assert phase["other_cores"] >= 0.7 * busy_cores
    assert phase["other_cores"] >= inside["other_cores"] + 0.5 * busy_cores
    assert outside["disturbed"] is (phase["other_cores"] > outside["limit_cores"])
    assert phase["host_cores"] == pytest.approx(inside["host_cores"], abs=0.15)


@pytest.mark.integration
def test_a_replay_beside_a_busy_process_is_marked_disturbed(
    tmp_path: Path, busy: subprocess.Popen[bytes]
) -> None:
    path, _ = small_study(tmp_path, "hierarchical")
    result = run_replay(path, tmp_path / "run")
    assert result.returncode == 0, result.stderr[-3000:]
    load = json.loads((tmp_path / "run" / "manifest.json").read_text())["host_load"]
    assert set(load["phases"]) == {"warmup", "measure", "drain"}
    measure = load["phases"]["measure"]
    assert measure["seconds"] == pytest.approx(2.0)
    assert measure["run_cores"] > 0  # the brokers and clients of the run
    assert measure["other_cores"] > load["limit_cores"]
    assert load["disturbed"] is True
