"""bench.hop_timeline: perf's trace of a chain is cut into each process's pass through
each event, and the hops are timed from write to write (synthetic `perf script` text;
the benchmark itself needs perf and is run by hand)."""

from __future__ import annotations

import pytest

from bench import hop_timeline

NODES = {100: 1, 200: 2}


def wakeup(t: float, woken: int, by: int = 999) -> str:
    return f"  {by} [000] {t:.6f}:     sched:sched_wakeup: comm=python pid={woken} prio=120"


def switch(t: float, to: int, prev: int = 999) -> str:
    return (
        f"  {prev} [000] {t:.6f}:     sched:sched_switch: prev_comm=x prev_pid={prev} "
        f"prev_prio=120 prev_state=S ==> next_comm=python next_pid={to} next_prio=120"
    )


def enter(t: float, pid: int, number: int, timeout: str = "31d") -> str:
    return (
        f"  {pid} [001] {t:.6f}: raw_syscalls:sys_enter: NR {number} (3, 7f00, 4, {timeout}, 0, 0)"
    )


def leave(t: float, pid: int, number: int) -> str:
    return f"  {pid} [001] {t:.6f}:  raw_syscalls:sys_exit: NR {number} = 1"


T = 1.0
US = 1e-6
LINES = [
    # node 2 wakes for an event, reads it, forwards it, waits again
    wakeup(T, 200),
    switch(T + 5 * US, 200),
    leave(T + 10 * US, 200, 232),
    enter(T + 50 * US, 200, 0),
    leave(T + 52 * US, 200, 0),
    enter(T + 100 * US, 200, 1),
    wakeup(T + 110 * US, 100, by=200),
    leave(T + 112 * US, 200, 1),
    # node 1 runs; a checkpoint (epoll_wait with timeout 0) between its read and write
    switch(T + 115 * US, 100, prev=200),
    leave(T + 120 * US, 100, 232),
    enter(T + 160 * US, 100, 45),
    enter(T + 170 * US, 100, 232, timeout="0"),
    leave(T + 171 * US, 100, 232),
    enter(T + 200 * US, 100, 44),
    enter(T + 260 * US, 100, 232),
    enter(T + 150 * US, 200, 232),
    # node 2 woken by a timer: no write, the pass is dropped
    wakeup(T + 0.001, 200),
    switch(T + 0.001 + 5 * US, 200),
    leave(T + 0.001 + 8 * US, 200, 232),
    enter(T + 0.001 + 30 * US, 200, 232),
    # an unrelated process and a line that is not a trace line
    enter(T + 0.002, 300, 1),
    "not a trace line",
]


def test_passes_are_cut_at_wake_up_run_epoll_read_write_and_the_next_wait() -> None:
    timeline = hop_timeline.parse(sorted(LINES[:-1], key=_time) + LINES[-1:], NODES)
    two, one = timeline.phases[2], timeline.phases[1]
    assert {k: [round(v) for v in vs] for k, vs in two.items()} == {
        "wake-up -> on a CPU": [5],
        "on a CPU -> epoll_wait returns": [5],
        "epoll_wait returns -> read": [40],
        "read -> write": [50],
        "write -> epoll_wait again": [50],
    }
    assert [round(v) for v in one["read -> write"]] == [40]  # the checkpoint is no wait
    assert [round(v) for v in one["wake-up -> on a CPU"]] == [5]
    assert timeline.writes == {2: [pytest.approx(T + 100 * US)], 1: [pytest.approx(T + 200 * US)]}


def test_hops_go_from_the_upstream_write_to_the_next_write_within_the_window() -> None:
    writes = {3: [1.0, 2.0], 2: [1.0001, 2.5], 1: [1.0003]}
    hops = hop_timeline.hops(writes, 3)
    assert [round(v) for v in hops[2]] == [100]  # 2.0 -> 2.5 is too late: another event
    assert [round(v) for v in hops[1]] == [200]
    summary = hop_timeline.summarize(hop_timeline.parse(sorted(LINES[:-1], key=_time), NODES), 2)
    assert summary["hop_us"] == {"2->1": 100.0}
    assert summary["passes"] == {"2": 1, "1": 1}


def _time(line: str) -> float:
    return float(line.split("]")[1].split(":")[0])
