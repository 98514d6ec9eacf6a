"""Keep every CPU from idling while a latency is measured: one idle-priority busy loop
per CPU.

On a virtual machine an idle vCPU halts, and waking it again for the next process of a
chain goes through the hypervisor. `chain` (bench.throughput) measures each chain
also with the CPUs kept busy this way, to tell how much of a hop's latency is owed to
idle CPUs rather than to the broker: a spinner runs under ``SCHED_IDLE``, so any
other process that wants its CPU takes it at once, and the CPU never halts.

``python -m bench.awake CPU SECONDS PARENT`` is one spinner: pinned to CPU, it spins
until killed, for at most SECONDS, and stops by itself once its parent is no longer
process PARENT (so a benchmark killed outright leaves no busy loop behind).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

from bench.common import REPO

MAX_SECONDS = 600.0
"""A spinner's longest life, whatever its parent does."""
START_TIMEOUT_S = 10.0


@contextmanager
def cpus_kept_awake(max_seconds: float = MAX_SECONDS) -> Iterator[list[int]]:
    """Run one spinner per CPU this process may use; yield their PIDs once all spin
    at idle priority; stop them (by PID) on the way out."""
    spinners: list[subprocess.Popen[bytes]] = []
    try:
        for cpu in sorted(os.sched_getaffinity(0)):
            spinners.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "bench.awake",
                        str(cpu),
                        str(max_seconds),
                        str(os.getpid()),
                    ],
                    cwd=REPO,
                )
            )
        _wait_until_idle_priority(spinners)
        yield [p.pid for p in spinners]
    finally:
        for p in spinners:
            p.kill()
        for p in spinners:
            p.wait()


def _wait_until_idle_priority(spinners: list[subprocess.Popen[bytes]]) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    waiting = list(spinners)
    while waiting:
        p = waiting[0]
        if p.poll() is not None:
            raise RuntimeError(f"spinner {p.args!r} exited with {p.returncode}")
        if os.sched_getscheduler(p.pid) == os.SCHED_IDLE:
            waiting.pop(0)
        elif time.monotonic() > deadline:
            raise RuntimeError(f"spinner {p.args!r} not at idle priority after {START_TIMEOUT_S} s")
        else:
            time.sleep(0.01)


def spin(cpu: int, seconds: float, parent: int) -> None:
    """Busy-loop on `cpu` at idle priority until `seconds` pass or this process's
    parent is no longer `parent` (given, not read at start: the parent may be gone by
    then)."""
    os.sched_setaffinity(0, {cpu})
    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    end = time.monotonic() + seconds
    while time.monotonic() < end and os.getppid() == parent:
        for _ in range(10_000):
            pass


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.awake", description=__doc__)
    parser.add_argument("cpu", type=int, help="the CPU to keep busy")
    parser.add_argument("seconds", type=float, help="stop after this long at the latest")
    parser.add_argument("parent", type=int, help="stop once the parent is not this PID")
    args = parser.parse_args(argv)
    spin(args.cpu, args.seconds, args.parent)


if __name__ == "__main__":
    main()
