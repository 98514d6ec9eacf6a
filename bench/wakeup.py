"""What a process wake-up costs here: CPU time per event at low rates, ours vs the relay.

At saturation a broker handles hundreds of events per wake-up; at a low rate it
wakes up for each one, and the CPU time of a wake-up (epoll, the scheduler, cold
caches on a vCPU that was halted) is paid per event. This benchmark publishes at
fixed low rates through one broker and through the relay (``bench.relay``, which
only decodes and re-sends), alternating, and reports per event the on-CPU time of
the broker or relay process, from the kernel's nanosecond run-time accounting
(the process's CPU clock, ``broker.process.process_cpu_s``), and the
p50 latency. It explains the latency targets of ``python -m bench``: when the
trivial relay itself needs ~200 us of CPU per event at 400 events/s, a hop cannot
cost much less.

Run: ``python -m bench.wakeup [--quick]``; writes ``bench/results/wakeup.json``.

``python -m bench.wakeup --against REV [--rounds N] [--quick]`` measures what a change
to the broker buys here: it checks REV out in a temporary git worktree (removed
afterwards) and runs this benchmark N times from each checkout, this one first in even
rounds and REV first in odd ones. Writes ``bench/results/wakeup_ab.json`` (``--out``):
every run, and per system and rate the CPU per event of this checkout over REV's, round
by round. The relay's code is the same on both sides unless the change touched it, so
its pairs show how far the host alone moves the figure.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import trio

from bench import throughput
from bench.common import (
    REPO,
    alternating,
    lookup,
    median,
    paired_cost,
    paired_cost_text,
    run_from,
    short_revision,
    worktree,
    write_result,
)
from broker.process import process_cpu_s, unwind_on_termination

RATES = (400.0, 2000.0)
FILLER = throughput.TOTAL_SUBSCRIPTIONS - 1


async def measure(
    system: throughput.RelaySystem | throughput.HopSystem, pid: int, rate: float, seconds: float
) -> dict[str, Any]:
    """CPU per event of process ``pid`` and latency p50 while publishing at ``rate``."""
    async with AsyncExitStack() as stack:
        await system.install_filler(stack, FILLER)
        sub = await system.subscriber(stack)
        pub = await system.publisher(stack)
        await trio.sleep(0.5)  # the subscription settled, the filler's replies read
        count = int(rate * seconds)
        before = process_cpu_s(pid)
        samples, achieved = await throughput.rate_limited([pub], [sub], 0, count, rate)
        cpu_s = process_cpu_s(pid) - before
    latencies = [latency for _, latency in samples]
    return {
        "rate": rate,
        "achieved_rate": round(achieved, 1),
        "events": count,
        "received": len(samples),
        "cpu_us_per_event": round(cpu_s / count * 1e6, 1),
        "p50_us": round(throughput.percentile(latencies, 50) / 1e3, 1) if latencies else None,
    }


def run(quick: bool, workdir: Path) -> dict[str, Any]:
    reps, seconds = (3, 2.0) if quick else (5, 5.0)
    systems: list[throughput.RelaySystem | throughput.HopSystem] = [
        throughput.RelaySystem(),
        throughput.HopSystem(),
    ]
    runs: dict[str, dict[float, list[dict[str, Any]]]] = {
        s.name: {rate: [] for rate in RATES} for s in systems
    }
    for rep in range(reps):
        for system in systems if rep % 2 == 0 else systems[::-1]:
            system.start(workdir)
            try:
                pid = system.pid()
                for rate in RATES:
                    result = trio.run(measure, system, pid, rate, seconds)
                    runs[system.name][rate].append(result)
                    print(f"rep {rep} {system.name:5s} {rate:6.0f}/s: {result}", file=sys.stderr)
            finally:
                system.stop()
    summary: dict[str, Any] = {}
    for name, per_rate in runs.items():
        summary[name] = {
            f"{rate:.0f}": {
                "cpu_us_per_event": median([r["cpu_us_per_event"] for r in results]),
                "p50_us": median([r["p50_us"] for r in results if r["p50_us"] is not None]),
                "runs": results,
            }
            for rate, results in per_rate.items()
        }
    return {"repetitions": reps, "seconds_per_run": seconds, "systems": summary}


def run_once(checkout: Path, quick: bool, out: Path) -> dict[str, Any]:
    """One run of this benchmark from ``checkout``, with its code; its result."""
    return run_from(checkout, "bench.wakeup", ["--quick"] if quick else [], out)


def compare(against: Path, rounds: int, quick: bool) -> dict[str, list[dict[str, Any]]]:
    """``rounds`` runs from this checkout and from ``against``, alternating; each run
    carries its round as ``repetition``, by which `pairs` pairs them."""
    checkouts = {"ours": REPO, "against": against}
    runs: dict[str, list[dict[str, Any]]] = {"ours": [], "against": []}
    with tempfile.TemporaryDirectory(prefix="bench-wakeup-ab-") as tmp:
        for index, side in alternating(rounds, ("ours", "against")):
            run = run_once(checkouts[side], quick, Path(tmp) / f"{side}{index}.json")
            runs[side].append({**run, "repetition": index})
            print(f"round {index + 1} {side}: " + ", ".join(
                f"{name} {rate}/s {r['cpu_us_per_event']} us"
                for name, per_rate in run["systems"].items() for rate, r in per_rate.items()
            ), file=sys.stderr, flush=True)  # fmt: skip
    return runs


def pairs(ours: list[dict[str, Any]], theirs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per system and rate measured in every run of both sides: each side's CPU per
    event (the run's median), their medians, and this side's over the other's per
    round."""
    out = []
    for system, per_rate in ours[0]["systems"].items() if ours else ():
        for rate in per_rate:

            def cpu(run: dict[str, Any], system: str = system, rate: str = rate) -> Any:
                return lookup(run, "systems", system, rate, "cpu_us_per_event")

            cost = paired_cost(ours, theirs, cpu)
            if cost is not None:
                out.append({"system": system, "rate": rate, **cost})
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 repetitions of 2 s")
    parser.add_argument("--against", help="the revision to compare with, in alternation")
    parser.add_argument("--rounds", type=int, default=6, help="runs from each checkout")
    parser.add_argument("--out", type=Path, help="result file (default bench/results/...)")
    args = parser.parse_args(argv)
    unwind_on_termination()  # stop what it started also when killed with SIGTERM
    if args.against:
        compare_against(args.against, args.rounds, args.quick, args.out)
        return
    with tempfile.TemporaryDirectory(prefix="bench-wakeup-") as tmp:
        result = run(args.quick, Path(tmp))
    for name, per_rate in result["systems"].items():
        for rate, r in per_rate.items():
            print(
                f"{name:5s} {rate:>5s}/s: {r['cpu_us_per_event']} us CPU/event, "
                f"p50 {r['p50_us']} us"
            )
    print(write_result("wakeup", result, args.out))


def compare_against(revision: str, rounds: int, quick: bool, out: Path | None) -> None:
    """The ``--against`` run: both checkouts in alternation, written and summarised."""
    with worktree(revision) as (theirs, short):
        runs = compare(theirs, rounds, quick)
    paired = pairs(runs["ours"], runs["against"])
    result = {
        "against": short,
        "ours_revision": short_revision(REPO),
        "command": "python -m bench.wakeup" + (" --quick" if quick else ""),
        "pairs": paired,
        "runs": runs,
    }
    print(write_result("wakeup_ab", result, out))
    for c in paired:
        print(
            f"{c['system']} at {c['rate']}/s: {c['median']} us CPU per event here, "
            f"{c['median_against']} at {short}; {paired_cost_text(c)}"
        )


if __name__ == "__main__":
    main()
