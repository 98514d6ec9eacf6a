"""Matching throughput: `MatchIndex` against the plain loop over `Filter.matches`.

Two workloads, each at 1k, 10k and 100k subscriptions, both engines in the same run
on the same events, medians over repetitions:

* ``equality``: ``family = N`` with N from 1..1000 (the case study's shape);
* ``mixed``: 3-5 constraints on 5 attributes: most filters start with an equality on
  ``family`` (200 values) or ``region`` (20 values), the rest are ranges (one-sided or
  intervals) on ``price``, ``quantity`` and ``rating``; 10 % have no equality at all.

The baseline's answers are compared with the index's on every baseline event, so a
fast but wrong index cannot report a number. Run: ``python -m bench.matching``.
"""

from __future__ import annotations

import argparse
import random
import sys
from typing import Any

from bench.common import median, timed, write_result
from routing import Filter, MatchIndex, parse_filter

REGIONS = [f"R{i:02d}" for i in range(20)]


def equality_filter(rng: random.Random) -> str:
    return f"family = {rng.randint(1, 1000)}"


def equality_event(rng: random.Random) -> dict[str, Any]:
    return {
        "type": "callForOffers",
        "family": rng.randint(1, 1000),
        "price": round(rng.uniform(0, 1000), 2),
        "dc": rng.randint(1, 8),
    }


def _range(rng: random.Random, name: str, low: float, high: float, as_int: bool) -> list[str]:
    def value(v: float) -> str:
        return str(int(v)) if as_int else f"{v:.2f}"

    if rng.random() < 0.5:
        op = rng.choice(["<", "<=", ">", ">="])
        return [f"{name} {op} {value(rng.uniform(low, high))}"]
    start = rng.uniform(low, high)
    width = (high - low) * rng.uniform(0.02, 0.3)
    return [f"{name} >= {value(start)}", f"{name} <= {value(start + width)}"]


def mixed_filter(rng: random.Random) -> str:
    parts: list[str] = []
    roll = rng.random()
    if roll < 0.7:
        parts.append(f"family = {rng.randint(1, 200)}")
    elif roll < 0.9:
        parts.append(f'region = "{rng.choice(REGIONS)}"')
    ranges = [
        ("price", 0.0, 1000.0, False),
        ("quantity", 1, 500, True),
        ("rating", 0.0, 5.0, False),
    ]
    rng.shuffle(ranges)
    for spec in ranges:
        if len(parts) >= 5 or (len(parts) >= 3 and rng.random() < 0.5):
            break
        parts += _range(rng, *spec)
    return " and ".join(parts[:5])


def mixed_event(rng: random.Random) -> dict[str, Any]:
    return {
        "family": rng.randint(1, 200),
        "region": rng.choice(REGIONS),
        "price": round(rng.uniform(0, 1000), 2),
        "quantity": rng.randint(1, 500),
        "rating": round(rng.uniform(0, 5), 1),
    }


WORKLOADS = {"equality": (equality_filter, equality_event), "mixed": (mixed_filter, mixed_event)}


def measure(workload: str, size: int, reps: int, seed: int = 7) -> dict[str, Any]:
    make_filter, make_event = WORKLOADS[workload]
    rng = random.Random(seed)
    filters: list[Filter] = [parse_filter(make_filter(rng)) for _ in range(size)]
    index: MatchIndex[int] = MatchIndex()
    build_s = timed(lambda: [index.add(i, f) for i, f in enumerate(filters)])
    plain = list(enumerate(filters))

    def loop(event: dict[str, Any]) -> set[int]:
        return {k for k, f in plain if f.matches(event)}

    # Enough events for roughly 0.3-1 s of each engine per repetition.
    loop_events = [make_event(rng) for _ in range(max(5, 1_000_000 // size))]
    probe = [make_event(rng) for _ in range(50)]
    per_event_s = timed(lambda: [index.match(e) for e in probe]) / len(probe)
    index_events = probe + [make_event(rng) for _ in range(min(50_000, int(0.5 / per_event_s)))]
    matches = [len(index.match(e)) for e in index_events]
    for e in loop_events:
        if loop(e) != index.match(e):
            raise AssertionError(f"index and loop disagree on {e}")
    index_rates, loop_rates = [], []
    for _ in range(reps):  # alternate the two engines
        index_rates.append(
            len(index_events) / timed(lambda: [index.match(e) for e in index_events])
        )
        loop_rates.append(len(loop_events) / timed(lambda: [loop(e) for e in loop_events]))
    index_rate, loop_rate = median(index_rates), median(loop_rates)
    return {
        "workload": workload,
        "subscriptions": size,
        "index_events_per_s": round(index_rate, 1),
        "loop_events_per_s": round(loop_rate, 1),
        "speedup": round(index_rate / loop_rate, 1),
        "index_us_per_event": round(1e6 / index_rate, 2),
        "loop_us_per_event": round(1e6 / loop_rate, 2),
        "mean_matches_per_event": round(sum(matches) / len(matches), 2),
        "index_build_adds_per_s": round(size / build_s, 1),
        "repetitions": reps,
    }


def run(sizes: list[int], reps: int) -> dict[str, Any]:
    rows = []
    for workload in WORKLOADS:
        for size in sizes:
            row = measure(workload, size, reps)
            print(
                f"{workload:9s} {size:>7d} subs: index {row['index_events_per_s']:>10.0f} ev/s, "
                f"loop {row['loop_events_per_s']:>8.1f} ev/s, x{row['speedup']:.0f}, "
                f"{row['mean_matches_per_event']} matches/event",
                file=sys.stderr,
            )
            rows.append(row)
    growth = {}
    for workload in WORKLOADS:
        per_size = {
            r["subscriptions"]: r["index_us_per_event"] for r in rows if r["workload"] == workload
        }
        ordered = sorted(per_size)
        growth[workload] = {
            f"{a}->{b}": round(per_size[b] / per_size[a], 2)
            for a, b in zip(ordered, ordered[1:], strict=False)
        }
    return {"rows": rows, "time_per_event_growth": growth}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one repetition")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    args = parser.parse_args(argv)
    result = run(args.sizes, 1 if args.quick else args.reps)
    path = write_result("matching", result)
    print(path)


if __name__ == "__main__":
    main()
