"""broker.process.process_cpu_s: another process's CPU time to the nanosecond, its
ended threads included; the benchmarks' CPU per event at a few hundred events rests
on it (ticks of 10 ms would read 0 for a process that used 5 ms)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

from broker.process import process_cpu_s

SPIN = """
import sys, threading, time
def spin(seconds):
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass
worker = threading.Thread(target=spin, args=(0.004,))
worker.start()
worker.join()  # ended: its CPU must still count
print(time.process_time(), flush=True)
sys.stdin.read()
"""


def test_it_agrees_with_this_process_own_clock() -> None:
    before = time.process_time()
    measured = process_cpu_s(os.getpid())
    after = time.process_time()
    assert before <= measured <= after


def test_a_few_milliseconds_of_an_ended_thread_are_counted() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", SPIN], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        own = float(child.stdout.readline())  # the child's own count, threads included
        seen = process_cpu_s(child.pid)
        assert own >= 0.004
        assert own <= seen < own + 0.05
        assert seen != round(seen, 2)  # not whole ticks
    finally:
        child.kill()
        child.wait()
    with pytest.raises(OSError):
        process_cpu_s(child.pid)


def test_a_thread_of_this_process_counts() -> None:
    before = process_cpu_s(os.getpid())
    worker = threading.Thread(target=lambda: sum(range(200_000)))
    worker.start()
    worker.join()
    assert process_cpu_s(os.getpid()) > before
