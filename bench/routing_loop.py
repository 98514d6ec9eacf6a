"""The broker's CPU per routed event, this checkout against another revision, measured
at the same time: what a change to the routing path buys, on a host whose speed
drifts by tens of percent from one minute to the next.

``python -m bench.routing_loop --against REV [--rounds N]`` checks REV out in a
temporary git worktree (removed afterwards), then in each round runs the harness
below in both checkouts at once, each process pinned to one of the two cores, the
cores swapped every round. Writes bench/results/routing_loop.json (``--name``):
per round each side's median CPU per event and their ratio (ours / theirs), and the
median and range of the ratios.

The harness (`harness`, run inside each checkout with its own code): the broker's
handling of reads as `bench.tracing_loop` drives it (no sockets; 64 KiB reads of
150-byte events, tracing off), with `bench.client_api`'s subscriptions: the
subscriber's ``type = "bench" and family = 0`` and 999 filler filters no event
matches, on another client link. CPU time of the thread per event, median of
``--reps`` passes over ``--events`` events.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.common import REPO, median, worktree, write_result

HARNESS = """
import json, os, statistics, sys, time
sys.path.insert(0, os.getcwd())
import trio
from bench.tracing_loop import LoopBroker
from bench.throughput import MATCHING_FILTER, filler_filters
from bench.client_api import event, hop_padding
from broker.protocol import new_event_frame
from broker.server import READ_SIZE
from routing import parse_filter

events, reps = int(sys.argv[1]), int(sys.argv[2])
pad = hop_padding("bench-pub")
data = b"".join(
    new_event_frame(f"bench-pub:{i}", "bench-pub", event(i, pad), time.time_ns())
    for i in range(events)
)
reads = [data[i : i + READ_SIZE] for i in range(0, len(data), READ_SIZE)]

async def main():
    loop = LoopBroker(None)
    router = loop.broker.router
    router.unsubscribe(loop.subscriber.link_id, 1)
    router.subscribe(loop.subscriber.link_id, 1, parse_filter(MATCHING_FILTER))
    for k, text in enumerate(filler_filters(999)):
        router.subscribe(loop.publisher.link_id, k + 1, parse_filter(text))
    samples = [await loop.cpu_per_event_us(reads) for _ in range(reps)]
    print(json.dumps({"cpu_us_per_event": statistics.median(samples), "samples": samples}))

trio.run(main)
"""


def harness_in(checkout: Path, core: int, events: int, reps: int) -> subprocess.Popen[str]:
    """The harness on ``checkout``'s code, pinned to ``core``."""
    cmd = ["taskset", "-c", str(core), sys.executable, "-c", HARNESS, str(events), str(reps)]
    return subprocess.Popen(cmd, cwd=checkout, stdout=subprocess.PIPE, text=True)


def result_of(proc: subprocess.Popen[str]) -> dict[str, Any]:
    out, _ = proc.communicate(timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"the harness exited with {proc.returncode}")
    return dict(json.loads(out.strip().splitlines()[-1]))


def compare(ours: Path, theirs: Path, rounds: int, events: int, reps: int) -> dict[str, Any]:
    """Both checkouts at once, round by round, cores swapped each round."""
    if len(os.sched_getaffinity(0)) < 2:
        raise SystemExit("routing_loop: needs two cores to run both sides at once")
    cores = sorted(os.sched_getaffinity(0))[:2]
    per_round = []
    for index in range(rounds):
        mine, other = (cores[0], cores[1]) if index % 2 == 0 else (cores[1], cores[0])
        procs = [harness_in(ours, mine, events, reps), harness_in(theirs, other, events, reps)]
        try:
            a, b = (result_of(p) for p in procs)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()  # by PID
                    p.wait()
        ratio = a["cpu_us_per_event"] / b["cpu_us_per_event"]
        per_round.append({"ours_core": mine, "ours_us": round(a["cpu_us_per_event"], 3),
                          "theirs_us": round(b["cpu_us_per_event"], 3),
                          "ratio": round(ratio, 3)})  # fmt: skip
        print(
            f"round {index + 1}: ours {a['cpu_us_per_event']:.2f} us/event (core {mine}), "
            f"theirs {b['cpu_us_per_event']:.2f}: {ratio:.3f}",
            file=sys.stderr,
            flush=True,
        )
    ratios = [r["ratio"] for r in per_round]
    return {
        "events_per_pass": events,
        "passes_per_round": reps,
        "rounds": per_round,
        "ratio_median": round(median(ratios), 3),
        "ratio_range": [min(ratios), max(ratios)],
        "ours_us_median": round(median([r["ours_us"] for r in per_round]), 3),
        "theirs_us_median": round(median([r["theirs_us"] for r in per_round]), 3),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", required=True, help="the revision to compare with")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--events", type=int, default=50_000, help="events per pass")
    parser.add_argument("--reps", type=int, default=5, help="passes per round and side")
    parser.add_argument("--name", default="routing_loop", help="result file's name")
    args = parser.parse_args(argv)
    with worktree(args.against) as (theirs, revision):
        result = compare(REPO, theirs, args.rounds, args.events, args.reps)
    result["against"] = revision
    print(write_result(args.name, result))
    print(f"ours / {revision}: median {result['ratio_median']} "
          f"(rounds {result['ratio_range'][0]}-{result['ratio_range'][1]}); CPU per event "
          f"{result['ours_us_median']} against {result['theirs_us_median']} us")  # fmt: skip


if __name__ == "__main__":
    main()
