"""Seeded event generation for replays: the SPECjms2007 call-for-offers event.

Each publisher has its own generator, seeded from the workload seed and its id, so
the same case study and seed give the same events and the same inter-arrival times.
Attributes (DESIGN 5, SPECjms2007 design document 004, message sizes per paper 001):

* ``type``: the workload's event type (``callForOffers``);
* ``family``: the product family, uniform over 1..families;
* ``size_kb``: 1.35, 7.06 or 36.52 with probabilities 95 / 4 / 1 %, and ``payload``:
  that many kilobytes of opaque bytes;
* ``dc``: the publishing distribution centre (the publisher id);
* ``price``: uniform in [1, 200), two decimals, so that range filters have
  something to select on (not part of SPECjms2007's message).
"""

from __future__ import annotations

import random
from typing import Any

from topologies.model import PublisherSpec, Workload

SIZES_KB = (1.35, 7.06, 36.52)
SIZE_WEIGHTS = (0.95, 0.04, 0.01)


class EventGenerator:
    """Events and inter-arrival times of one publisher."""

    def __init__(self, workload: Workload, publisher: PublisherSpec, rate: float) -> None:
        if rate <= 0:
            raise ValueError(f"publisher {publisher.id}: rate must be positive, got {rate}")
        self.workload = workload
        self.publisher = publisher
        self.rate = rate
        self.rng = random.Random(f"{workload.seed}:{publisher.id}")
        self._payloads = {size: bytes(round(size * 1024)) for size in SIZES_KB}

    def interarrival_s(self) -> float:
        """Seconds until the next publication (Poisson or constant arrivals)."""
        if self.publisher.arrival == "constant":
            return 1.0 / self.rate
        return self.rng.expovariate(self.rate)

    def event(self) -> dict[str, Any]:
        rng = self.rng
        size = rng.choices(SIZES_KB, SIZE_WEIGHTS)[0]
        return {
            "type": self.workload.event_type,
            "family": rng.randint(1, self.workload.families),
            "size_kb": size,
            "dc": self.publisher.id,
            "price": round(rng.uniform(1.0, 200.0), 2),
            "payload": self._payloads[size],
        }
