"""Where a chain hop's time goes at low load, ours and the relay's, from kernel
tracepoints.

`python -m bench` measures the latency a broker hop adds in a chain of 5 (``chain``);
this says what that time is made of. Each chain in turn (ours, then the relay's) runs
the chain workload (1000 subscriptions and the subscriber at node 1, a publisher at
the far end, ``CHAIN_RATE`` events/s) while ``perf record`` captures, for the chain's
processes only, the scheduler's wake-ups and switches and the entry and exit of every
system call. Each event's pass through each process is then cut at: the wake-up
(``sched_wakeup``), the switch onto a CPU, the return from ``epoll_wait``, the read
that brings the frame, and the write that sends it on. The medians of the phases
between them, per process, and of each hop (from the write of the process before to
the write of this one) are reported. Node 1 delivers to the subscriber, nodes 2-5
forward to their parent; node 5 is woken by the publisher, which is not traced, so
neither its phases nor its hop are reported. Tracing adds a few microseconds per
system call, so the hops come out longer than in ``chain``; compare the phases, and
ours with the relay's.

Needs ``perf`` with access to tracepoints (root, or ``kernel.perf_event_paranoid``
at -1) on x86-64 (the system call numbers); skips with the reason otherwise.
Run: ``python -m bench.hop_timeline [--events N] [--cpus-kept-awake]``; writes
``bench/results/hop_timeline.json`` (or ``hop_timeline_cpus_kept_awake.json``).
"""

from __future__ import annotations

import argparse
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from collections.abc import Iterable
from contextlib import AsyncExitStack, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio

from bench import throughput
from bench.awake import cpus_kept_awake
from bench.common import write_result
from broker.process import unwind_on_termination

EVENTS = 1200
TRACEPOINTS = "sched:sched_switch,sched:sched_wakeup,raw_syscalls:sys_enter,raw_syscalls:sys_exit"
# x86-64 system call numbers.
READS = {0, 45}  # read, recvfrom
WRITES = {1, 20, 44}  # write, writev, sendto
EPOLL_WAITS = {232, 281}  # epoll_wait, epoll_pwait
HOP_WINDOW_S = 0.005  # a write more than this after the upstream's is another event's
PHASES = (
    ("wake", "run", "wake-up -> on a CPU"),
    ("run", "epoll", "on a CPU -> epoll_wait returns"),
    ("epoll", "read", "epoll_wait returns -> read"),
    ("read", "write", "read -> write"),
    ("write", "idle", "write -> epoll_wait again"),
)

_LINE = re.compile(r"^\s*(\d+)\s+\[\d+\]\s+([\d.]+):\s+(\S+):\s+(.*)$")
_WOKEN = re.compile(r"\bpid=(\d+)")
_RUNNING = re.compile(r"\bnext_pid=(\d+)")
# "NR 232 (3, 7f.., 4, 31d, 0, 0)" on entry (the 4th argument: epoll_wait's timeout,
# hex), "NR 232 = 1" on exit.
_SYSCALL = re.compile(r"NR (\d+) (?:\((?:[^,]*, ){3}([0-9a-f]+)|.*)")


@dataclass
class Timeline:
    """Phases (microseconds) per node, and the writes of each node (seconds)."""

    phases: dict[int, dict[str, list[float]]]
    writes: dict[int, list[float]]


def parse(lines: Iterable[str], nodes: dict[int, int]) -> Timeline:
    """Cut ``perf script -F pid,cpu,time,event,trace`` output of the processes
    ``nodes`` (PID -> node) into passes, one per event and process (module doc). A pass
    ends when the process waits in epoll_wait again (a timeout of 0 is a scheduler
    checkpoint, not a wait); one that wrote nothing (a timer, a heartbeat) is dropped."""
    phases: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    writes: dict[int, list[float]] = defaultdict(list)
    passes: dict[int, dict[str, float]] = {}  # PID -> step -> when, of the open pass
    for line in lines:
        match = _LINE.match(line)
        if match is None:
            continue
        pid, t, event, detail = int(match[1]), float(match[2]), match[3], match[4]
        if event == "sched:sched_wakeup":
            woken = _WOKEN.search(detail)
            if woken is not None and int(woken[1]) in nodes:
                passes.setdefault(int(woken[1]), {"wake": t})
            continue
        if event == "sched:sched_switch":
            running = _RUNNING.search(detail)
            times = passes.get(int(running[1])) if running is not None else None
            if times is not None:
                times.setdefault("run", t)
            continue
        syscall = _SYSCALL.match(detail)
        if pid not in nodes or syscall is None:
            continue
        number = int(syscall[1])
        entering = event == "raw_syscalls:sys_enter"
        if entering and number in WRITES:
            writes[nodes[pid]].append(t)
        times = passes.get(pid)
        if times is None:
            continue
        if not entering:
            if number in EPOLL_WAITS and "run" in times:
                times.setdefault("epoll", t)
        elif number in READS and "epoll" in times:
            times.setdefault("read", t)
        elif number in WRITES and "read" in times:
            times.setdefault("write", t)
        elif number in EPOLL_WAITS and syscall[2] != "0":  # waiting again: the pass ends
            del passes[pid]
            if "write" in times:
                times["idle"] = t
                node_phases = phases[nodes[pid]]
                for start, end, name in PHASES:
                    node_phases[name].append((times[end] - times[start]) * 1e6)
    return Timeline(phases, writes)


def hops(writes: dict[int, list[float]], length: int) -> dict[int, list[float]]:
    """Per node n < length: for each write of node n+1, the time (us) to node n's next
    write, if within HOP_WINDOW_S (the same event going on)."""
    out: dict[int, list[float]] = {}
    for node in range(1, length):
        mine = writes.get(node, [])
        times: list[float] = []
        k = 0
        for t in writes.get(node + 1, []):
            while k < len(mine) and mine[k] <= t:
                k += 1
            if k < len(mine) and mine[k] - t <= HOP_WINDOW_S:
                times.append((mine[k] - t) * 1e6)
        out[node] = times
    return out


def summarize(timeline: Timeline, length: int) -> dict[str, Any]:
    def med(values: list[float]) -> float | None:
        return round(statistics.median(values), 1) if values else None

    per_hop = hops(timeline.writes, length)
    hop_medians = [m for m in (med(v) for v in per_hop.values()) if m is not None]
    return {
        "hop_us": {f"{n + 1}->{n}": med(v) for n, v in per_hop.items()},
        "hop_us_mean_of_medians": round(statistics.mean(hop_medians), 1) if hop_medians else None,
        "phases_us": {
            str(node): {name: med(timeline.phases[node][name]) for _, _, name in PHASES}
            for node in sorted(timeline.phases)
        },
        "passes": {str(node): len(p[PHASES[0][2]]) for node, p in timeline.phases.items()},
    }


def perf_problem() -> str | None:
    """Why tracing cannot run here, or None."""
    if platform.machine() != "x86_64":
        return f"system call numbers are x86-64's, this is {platform.machine()}"
    if shutil.which("perf") is None:
        return "perf is not installed (Debian: linux-perf)"
    probe = subprocess.run(
        ["perf", "record", "-q", "-o", "/dev/null", "-e", TRACEPOINTS, "--", "true"],
        capture_output=True,
        text=True,
        check=False,
    )
    if probe.returncode != 0:
        return f"perf cannot record tracepoints: {probe.stderr.strip()[-300:]}"
    return None


async def traced_run(
    system: throughput.System, pids: list[int], events: int, data: Path, awake: bool
) -> None:
    """The chain workload on ``system`` while perf records its processes ``pids`` (and
    the CPUs are kept from idling if `awake`)."""
    rate = throughput.CHAIN_RATE
    length = throughput.CHAIN_LENGTH
    async with AsyncExitStack() as stack:
        await system.install_filler(stack, throughput.TOTAL_SUBSCRIPTIONS - 1, node=1)
        subs = [await system.subscriber(stack, node=1)]
        pubs = [await system.publisher(stack, node=length)]
        await throughput.rate_limited(pubs, subs, 0, 200, rate)  # warm-up
        command = ["perf", "record", "-q", "-o", str(data), "-e", TRACEPOINTS]
        perf = subprocess.Popen([*command, "-p", ",".join(map(str, pids))])
        try:
            with cpus_kept_awake() if awake else nullcontext():
                await trio.sleep(1.0)  # perf attached
                await throughput.rate_limited(pubs, subs, 1_000_000, events, rate)
        finally:
            perf.send_signal(signal.SIGINT)  # perf writes its data out and exits
            try:
                perf.wait(timeout=30)
            except subprocess.TimeoutExpired:
                perf.kill()
                perf.wait()
                raise


def measure(
    system: throughput.HopSystem | throughput.RelaySystem, events: int, workdir: Path, awake: bool
) -> dict[str, Any]:
    """The traced workload on ``system``'s chain, summarized."""
    length = throughput.CHAIN_LENGTH
    data = workdir / f"{system.name}.perf"
    system.start(workdir)
    try:
        pids = [system.pid(node) for node in range(1, length + 1)]
        trio.run(traced_run, system, pids, events, data, awake)
    finally:
        system.stop()
    script = subprocess.run(
        ["perf", "script", "-i", str(data), "-F", "pid,cpu,time,event,trace"],
        capture_output=True,
        text=True,
        check=True,
    )
    nodes = {pid: node for node, pid in enumerate(pids, start=1)}
    return summarize(parse(script.stdout.splitlines(), nodes), length)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=EVENTS, help="events per chain")
    parser.add_argument(
        "--cpus-kept-awake",
        action="store_true",
        help="keep every CPU from idling (bench.awake); writes hop_timeline_cpus_kept_awake.json",
    )
    args = parser.parse_args(argv)
    name = "hop_timeline_cpus_kept_awake" if args.cpus_kept_awake else "hop_timeline"
    problem = perf_problem()
    if problem is not None:
        print(f"hop_timeline skipped: {problem}", file=sys.stderr)
        print(write_result(name, {"skipped": problem}))
        return
    unwind_on_termination()
    length = throughput.CHAIN_LENGTH
    result: dict[str, Any] = {
        "rate": throughput.CHAIN_RATE,
        "events": args.events,
        "cpus_kept_awake": args.cpus_kept_awake,
    }
    with tempfile.TemporaryDirectory(prefix="bench-hop-timeline-") as tmp:
        for system in (throughput.HopSystem(length), throughput.RelaySystem(length)):
            summary = measure(system, args.events, Path(tmp), args.cpus_kept_awake)
            result[system.name] = summary
            print(f"{system.name}: hops {summary['hop_us']} us")
            for node, phases in summary["phases_us"].items():
                print(f"  node {node}: {phases}")
    print(write_result(name, result))


if __name__ == "__main__":
    main()
