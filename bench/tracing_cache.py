"""The broker's own cost of tracing, counted rather than timed: instructions and
simulated cache misses per event, on and off.

On a shared 2-core VM the time per event moves 10-30 % within seconds, so a cost of a few per
cent is hard to see with a clock (`bench.tracing_loop`, `bench.tracing_overhead`).
Counts do not move: this runs `bench.tracing_loop`'s in-process broker (one read of
64 KiB of 150-byte events after the other, routed to one subscriber) under valgrind's
cachegrind, with the host's first-level data cache and, as the last level, the host's
L2 (the largest cache one core has to itself). Each mode runs twice, with few and with
many events; the difference is the cost of the extra events alone (start-up and
imports cancel). `PYTHONHASHSEED` is fixed, so both modes lay out their dicts alike.
The trace writer process is not counted (valgrind follows only the broker).

Instructions are not time: a miss in L2 costs tens of instructions' time. The point
is to see which of the two grows, and by how much, without the noise.
Run: ``python -m bench.tracing_cache`` (~3 minutes on 2 cores; needs valgrind).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import trio

from bench.common import write_result
from bench.tracing_loop import LoopBroker, reads_of
from broker.process import unwind_on_termination

FEW, MANY = 2_000, 12_000
_COUNTS = {
    "instructions": r"I\s+refs:\s+([\d,]+)",
    "d1_misses": r"D1\s+misses:\s+([\d,]+)",
    "l2_misses": r"LLd misses:\s+([\d,]+)",
}


def cache_option(level: int, option: str) -> str:
    """cachegrind's `--D1=` or `--LL=` value (size,ways,line) for this host's data cache
    of that level, from sysfs."""
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        kind = (index / "type").read_text().strip()
        if int((index / "level").read_text()) == level and kind in ("Data", "Unified"):
            size = (index / "size").read_text().strip()
            number = int(size.rstrip("KM")) * (1 << 20 if size.endswith("M") else 1 << 10)
            ways = int((index / "ways_of_associativity").read_text())
            line = int((index / "coherency_line_size").read_text())
            return f"--{option}={number},{ways},{line}"
    raise RuntimeError(f"no level-{level} data cache described in sysfs")


def counted(traced: bool, events: int, options: list[str]) -> dict[str, int]:
    """cachegrind's totals for a process handling `events` events."""
    with tempfile.TemporaryDirectory() as tmp:
        child = [sys.executable, "-m", "bench.tracing_cache", "--child"]
        child += ["on" if traced else "off", str(events), tmp]
        return cachegrind(child, options, {**os.environ, "PYTHONHASHSEED": "0"})


def cachegrind(command: list[str], options: list[str], env: dict[str, str]) -> dict[str, int]:
    """The totals of `_COUNTS` in cachegrind's summary of `command` run under valgrind
    with the cache `options`; RuntimeError if the run fails or a total is missing."""
    done = subprocess.run(
        ["valgrind", "--tool=cachegrind", "--cache-sim=yes", *options,
         "--cachegrind-out-file=/dev/null", *command],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"cachegrind run failed: {done.stderr[-2000:]}")
    totals = {}
    for name, pattern in _COUNTS.items():
        found = re.search(pattern, done.stderr)
        if found is None:
            raise RuntimeError(f"no {name} in cachegrind's summary: {done.stderr[-2000:]}")
        totals[name] = int(found.group(1).replace(",", ""))
    return totals


def run() -> dict[str, Any]:
    if shutil.which("valgrind") is None:
        raise RuntimeError("valgrind is not installed (scripts/system_deps.sh installs it)")
    options = [cache_option(1, "D1"), cache_option(2, "LL")]
    jobs = [(traced, events) for traced in (False, True) for events in (FEW, MANY)]

    def counted_job(job: tuple[bool, int]) -> dict[str, int]:
        traced, events = job
        return counted(traced, events, options)

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        totals = dict(zip(jobs, pool.map(counted_job, jobs), strict=True))
    per_event = {
        mode: {
            name: round(
                (totals[(traced, MANY)][name] - totals[(traced, FEW)][name]) / (MANY - FEW), 1
            )
            for name in _COUNTS
        }
        for mode, traced in (("off", False), ("on", True))
    }
    added = {
        name: {
            "per_event": round(per_event["on"][name] - per_event["off"][name], 1),
            "percent": round((per_event["on"][name] / per_event["off"][name] - 1) * 100, 1),
        }
        for name in _COUNTS
    }
    return {
        "cache_options": options,
        "events": [FEW, MANY],
        "per_event": per_event,
        "tracing_adds": added,
    }


def child(mode: str, events: int, workdir: str) -> None:
    """The process cachegrind watches: one loop broker handling `events` events."""
    reads = reads_of(events)

    async def handle() -> None:
        loop = LoopBroker(Path(workdir) / "traces" if mode == "on" else None)
        try:
            await loop.cpu_per_event_us(reads)
        finally:
            loop.close()

    trio.run(handle)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--child", nargs=3, metavar=("MODE", "EVENTS", "DIR"), help=argparse.SUPPRESS
    )
    args = parser.parse_args(argv)
    unwind_on_termination()  # stop what it started also when killed with SIGTERM
    if args.child:
        mode, events, workdir = args.child
        child(mode, int(events), workdir)
        return
    result = run()
    print(write_result("tracing_cache", result))
    for name, added in result["tracing_adds"].items():
        print(f"tracing adds {added['per_event']} {name} per event ({added['percent']} %)")


if __name__ == "__main__":
    main()
