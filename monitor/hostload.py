"""The CPU that processes outside a replay used on its host, per phase.

A replay's latencies move with whatever else the host runs. To say whether a run was
measured on a quiet host, a sampler thread in the replay reads, every
`SAMPLE_INTERVAL_S`, the host's busy CPU time (``/proc/stat``: user, nice, system,
irq, softirq, steal; steal, the time the hypervisor gave the cores to other machines,
also on its own) and the CPU time of the run's own processes: the replay process
and every process descended from it (brokers, their trace writers, client processes),
each with its reaped children (``/proc/PID/stat`` utime + stime + cutime + cstime).
The other processes' share is the difference. Both are cumulative counters, read at
the phase boundaries by linear interpolation between samples, so a phase's figure is
its own however the samples fall. A sample costs the replay process about 2.5 ms of CPU
per hundred processes on the host (half a percent of a core at two samples a second),
counted as the run's own.

Decision: a run is *disturbed* when other processes used more than
`OTHER_CPU_LIMIT_CORES` cores on average in its warm-up or its measurement window
(the drain is recorded but not judged: its events are not analysed). Brokers that a
replay attaches to were started elsewhere and count as other load, so an attached
run is recorded but not judged. Only this host is observed: processes of the run on
other hosts are not, nor is the load there.
"""

from __future__ import annotations

import bisect
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from broker.procfs import PROC, stat_fields

OTHER_CPU_LIMIT_CORES = 0.2
"""Cores that processes outside the run may use on average in a judged phase before the
run is marked disturbed (docs/accuracy.md)."""

SAMPLE_INTERVAL_S = 0.5
JUDGED_PHASES = ("warmup", "measure")
TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Sample:
    """Cumulative CPU seconds at one wall-clock instant (time.time_ns())."""

    t_ns: int
    host_busy_s: float
    run_s: float
    steal_s: float = 0.0  # of host_busy_s: the hypervisor ran something else


def host_busy_seconds(proc: Path = PROC) -> tuple[float, float]:
    """CPU seconds the host's cores have been busy since boot (all processes, and the
    time a hypervisor took the cores away), and of these the stolen ones."""
    fields = (proc / "stat").read_text().split("\n", 1)[0].split()[1:]
    ticks = [int(x) for x in fields]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (ticks + [0] * 8)[:8]
    return (user + nice + system + irq + softirq + steal) * TICK_S, steal * TICK_S


def tree_cpu_seconds(root: int, proc: Path = PROC) -> float:
    """CPU seconds of `root` and all its descendants, each with its reaped children.

    A descendant that exits and is reaped by its parent moves its time into the
    parent's cutime/cstime, so the sum stays continuous across exits."""
    children: dict[bytes, list[bytes]] = {}
    cpu: dict[bytes, int] = {}
    for name in os.listdir(proc):
        if not name.isdigit():
            continue
        fields = stat_fields(f"{proc}/{name}/stat")
        if fields is None:
            continue
        pid = name.encode()
        children.setdefault(fields[1], []).append(pid)  # field 4: ppid
        cpu[pid] = sum(int(x) for x in fields[11:15])  # fields 14-17, in ticks
    ticks, stack = 0, [str(root).encode()]
    while stack:
        pid = stack.pop()
        ticks += cpu.get(pid, 0)
        stack += children.get(pid, [])
    return ticks * TICK_S


def take_sample(root: int) -> Sample:
    busy, steal = host_busy_seconds()
    return Sample(time.time_ns(), busy, tree_cpu_seconds(root), steal)


class HostLoad:
    """Samples the host's and the run's CPU in a thread while the `with` block runs."""

    def __init__(self, root: int | None = None, interval_s: float = SAMPLE_INTERVAL_S) -> None:
        self.root = os.getpid() if root is None else root
        self.interval_s = interval_s
        self.samples: list[Sample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="hostload", daemon=True)

    def __enter__(self) -> HostLoad:
        self.samples.append(take_sample(self.root))
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.samples.append(take_sample(self.root))

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.samples.append(take_sample(self.root))

    def record(self, bounds: dict[str, tuple[int, int]], judge: bool = True) -> dict[str, Any]:
        """The manifest's `host_load`: per phase, cores used by the host, the run and the
        other processes; and whether the run was disturbed (None when not judged)."""
        return host_load(self.samples, bounds, judge)


def phase_cores(samples: list[Sample], start_ns: int, end_ns: int) -> dict[str, float] | None:
    """Mean cores used in [start_ns, end_ns] by the host, the run, and the others; None
    when the phase is empty or outside the samples."""
    if len(samples) < 2 or end_ns <= start_ns:
        return None
    t = [s.t_ns for s in samples]
    if start_ns < t[0] or end_ns > t[-1]:
        return None
    seconds = (end_ns - start_ns) / 1e9

    def used(values: list[float]) -> float:
        return (_at(t, values, end_ns) - _at(t, values, start_ns)) / seconds

    host = used([s.host_busy_s for s in samples])
    run = used([s.run_s for s in samples])
    return {
        "seconds": round(seconds, 3),
        "host_cores": round(host, 3),
        "run_cores": round(run, 3),
        "other_cores": round(max(host - run, 0.0), 3),
        "steal_cores": round(used([s.steal_s for s in samples]), 3),
    }


def _at(t: list[int], values: list[float], x: int) -> float:
    """`values` (a counter sampled at the increasing times `t`) at `x`, interpolated
    linearly; `x` within [t[0], t[-1]]."""
    i = bisect.bisect_left(t, x)
    if t[i] == x:
        return values[i]
    share = (x - t[i - 1]) / (t[i] - t[i - 1])
    return values[i - 1] + (values[i] - values[i - 1]) * share


def host_load(
    samples: list[Sample], bounds: dict[str, tuple[int, int]], judge: bool = True
) -> dict[str, Any]:
    """`host_load` for the phases in `bounds` (name -> (start_ns, end_ns))."""
    phases = {name: phase_cores(samples, lo, hi) for name, (lo, hi) in bounds.items()}
    judged = [load["other_cores"] for p in JUDGED_PHASES if (load := phases.get(p))]
    disturbed = any(c > OTHER_CPU_LIMIT_CORES for c in judged) if judge and judged else None
    return {
        "limit_cores": OTHER_CPU_LIMIT_CORES,
        "judged_phases": list(JUDGED_PHASES),
        "phases": phases,
        "disturbed": disturbed,
        "cores": os.cpu_count(),
        "note": "cores used on average by processes outside the run (host busy CPU from "
        "/proc/stat minus the replay and its descendants); this host only",
    }


def phase_bounds(phases: Any) -> dict[str, tuple[int, int]]:
    """The warm-up, measurement and drain of a replay's `Phases`."""
    return {
        "warmup": (phases.start_ns, phases.measure_start_ns),
        "measure": (phases.measure_start_ns, phases.measure_end_ns),
        "drain": (phases.measure_end_ns, phases.drain_end_ns),
    }


def disturbed(manifest: dict[str, Any]) -> bool:
    """Whether a replay's manifest marks it disturbed (False when not recorded)."""
    return bool((manifest.get("host_load") or {}).get("disturbed"))
