"""A short tour of the matching engine: parse, cover, index, match (`make demo`)."""

from __future__ import annotations

import random
import time

from routing import MatchIndex, covers, parse_filter


def main() -> None:
    wide = parse_filter('type = "callForOffers" and price < 200')
    narrow = parse_filter('type = "callForOffers" and price > 50 and price < 120.5 and family = 7')
    print(f"filter A: {wide}\nfilter B: {narrow}")
    print(f"A covers B: {covers(wide, narrow)}   B covers A: {covers(narrow, wide)}")

    rng = random.Random(1)
    index: MatchIndex[int] = MatchIndex()
    for key in range(100_000):
        family, low = rng.randint(1, 1000), rng.uniform(0, 900)
        index.add(key, parse_filter(f"family = {family} and price >= {low:.2f}"))
    event = {"type": "callForOffers", "family": 7, "price": 99.0}
    start = time.perf_counter()
    for _ in range(1000):
        matched = index.match(event)
    per_event_us = (time.perf_counter() - start) * 1e3
    print(f"100000 subscriptions indexed; {event} matches {len(matched)} of them")
    print(f"one match takes {per_event_us:.1f} us (benchmark: python -m bench.matching)")


if __name__ == "__main__":
    main()
