"""Matching throughput: `MatchIndex` against the plain loop over `Filter.matches`.

Two workloads, each at 1k, 10k and 100k subscriptions, both engines in the same run
on the same events, medians over repetitions:

* ``equality``: ``family = N`` with N from 1..1000 (the case study's shape);
* ``mixed``: 3-5 constraints on 5 attributes: most filters start with an equality on
  ``family`` (200 values) or ``region`` (20 values), the rest are ranges (one-sided or
  intervals) on ``price``, ``quantity`` and ``rating``; 10 % have no equality at all.
  Its value domains are fixed, so matches per event grow as fast as the table;
* ``mixed-growing``: the same shapes, but the domains grow with the table (one
  family per 5 subscriptions, one region per 50) and every filter has its equality:
  more subscribers bring more distinct interests, as in the case study where each
  store subscribes to its own families. Matches per event stay about constant, so
  this is the workload on which "time per event grows far less than the table"
  can be checked; on ``mixed`` the output alone grows 10x per 10x.

The baseline's answers are compared with the index's on every baseline event, so a
fast but wrong index cannot report a number. Run: ``python -m bench.matching``.
"""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Callable
from typing import Any

from bench.common import median, timed, write_result
from routing import Filter, MatchIndex, parse_filter


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


class Mixed:
    """Filters and events of a mixed workload with `families` and `regions` values;
    `range_only` is the share of filters without an equality constraint."""

    def __init__(self, families: int, regions: int, range_only: float) -> None:
        self.families = families
        self.regions = [f"R{i:02d}" for i in range(regions)]
        self.range_only = range_only

    def filter(self, rng: random.Random) -> str:
        parts: list[str] = []
        roll = rng.random() / (1 - self.range_only)  # >= 1 for the range-only share
        if roll < 0.7 / 0.9:
            parts.append(f"family = {rng.randint(1, self.families)}")
        elif roll < 1:
            parts.append(f'region = "{rng.choice(self.regions)}"')
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

    def event(self, rng: random.Random) -> dict[str, Any]:
        return {
            "family": rng.randint(1, self.families),
            "region": rng.choice(self.regions),
            "price": round(rng.uniform(0, 1000), 2),
            "quantity": rng.randint(1, 500),
            "rating": round(rng.uniform(0, 5), 1),
        }


def workload(name: str, size: int) -> tuple[Callable[[random.Random], str], Callable[..., Any]]:
    """The filter and event generators of workload `name` at `size` subscriptions."""
    if name == "equality":
        return equality_filter, equality_event
    if name == "mixed":
        mixed = Mixed(families=200, regions=20, range_only=0.1)
    else:
        mixed = Mixed(families=max(200, size // 5), regions=max(20, size // 50), range_only=0)
    return mixed.filter, mixed.event


WORKLOADS = ("equality", "mixed", "mixed-growing")


def measure(name: str, size: int, reps: int, seed: int = 7) -> dict[str, Any]:
    make_filter, make_event = workload(name, size)
    rng = random.Random(seed)
    filters: list[Filter] = [parse_filter(make_filter(rng)) for _ in range(size)]
    index: MatchIndex[int] = MatchIndex()

    def build_index() -> None:
        for i, f in enumerate(filters):
            index.add(i, f)

    build_s = timed(build_index)
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
        "workload": name,
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
    for name in WORKLOADS:
        for size in sizes:
            row = measure(name, size, reps)
            print(
                f"{name:13s} {size:>7d} subs: index {row['index_events_per_s']:>10.0f} ev/s, "
                f"loop {row['loop_events_per_s']:>8.1f} ev/s, x{row['speedup']:.0f}, "
                f"{row['mean_matches_per_event']} matches/event",
                file=sys.stderr,
            )
            rows.append(row)
    growth = {}
    for name in WORKLOADS:
        per_size = {
            r["subscriptions"]: r["index_us_per_event"] for r in rows if r["workload"] == name
        }
        ordered = sorted(per_size)
        growth[name] = {
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
