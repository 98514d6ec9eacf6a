"""Seeded event generation for replays: the SPECjms2007 call-for-offers event, or
a publisher's own event mix.

Each publisher has its own generator, seeded from the workload seed and its id, so
the same case study and seed give the same events and the same inter-arrival times.

A publisher with an event mix (``[[publishers.events]]``, `topologies.model.EventSpec`)
draws each event's kind by weight, then its attributes as that kind describes:
``type``, the fixed attributes, one value of each ``choose`` list, a number from
each ``ranges`` interval, ``size_kb`` from the kind's sizes and an opaque
``payload`` of that many kilobytes.

A publisher without one emits the workload's single event type.
Attributes (SPECjms2007's call for offers; message sizes from Sachs et al.,
"Performance evaluation of message-oriented middleware using the SPECjms2007
benchmark", Table 5):

* ``type``: the workload's event type (``callForOffers``);
* ``family``: the product family, uniform over 1..families;
* ``size_kb``: 1.35, 7.06 or 36.52 with probabilities 95 / 4 / 1 %, and ``payload``:
  that many kilobytes of opaque bytes;
* ``dc``: the publishing distribution centre (the publisher id);
* ``price``: uniform in [1, 200), two decimals, so that range filters have
  something to select on (not part of SPECjms2007's message).
"""

from __future__ import annotations

import math
import random
from typing import Any

from topologies.model import EventSpec, PublisherSpec, Workload

SIZES_KB = (1.35, 7.06, 36.52)
SIZE_WEIGHTS = (0.95, 0.04, 0.01)


class EventGenerator:
    """Events and inter-arrival times of one publisher."""

    def __init__(self, workload: Workload, publisher: PublisherSpec, rate: float) -> None:
        """`rate` events/s; 0 is a publisher that publishes nothing (a scenario may turn
        one off), whose first event never comes."""
        if not 0 <= rate < math.inf:
            raise ValueError(f"publisher {publisher.id}: rate must be finite and at least 0")
        self.workload = workload
        self.publisher = publisher
        self.rate = rate
        self.rng = random.Random(f"{workload.seed}:{publisher.id}")
        self._payloads: dict[float, bytes] = {}
        self._kinds = publisher.events
        self._kind_weights = [kind.weight for kind in publisher.events]

    def interarrival_s(self) -> float:
        """Seconds until the next publication (Poisson or constant arrivals)."""
        if self.rate == 0:
            return math.inf
        if self.publisher.arrival == "constant":
            return 1.0 / self.rate
        return self.rng.expovariate(self.rate)

    def event(self) -> dict[str, Any]:
        if self._kinds:
            kind = self.rng.choices(self._kinds, self._kind_weights)[0]
            return self._mixed_event(kind)
        rng = self.rng
        size = rng.choices(SIZES_KB, SIZE_WEIGHTS)[0]
        return {
            "type": self.workload.event_type,
            "family": rng.randint(1, self.workload.families),
            "size_kb": size,
            "dc": self.publisher.id,
            "price": round(rng.uniform(1.0, 200.0), 2),
            "payload": self._payload(size),
        }

    def _mixed_event(self, kind: EventSpec) -> dict[str, Any]:
        rng = self.rng
        event: dict[str, Any] = {"type": kind.type, **kind.attributes}
        for name, values in kind.choose.items():
            event[name] = rng.choice(values)
        for name, (lo, hi) in kind.ranges.items():
            if isinstance(lo, int) and isinstance(hi, int):
                event[name] = rng.randint(lo, hi)
            else:
                event[name] = round(rng.uniform(lo, hi), 2)
        size = rng.choices(kind.sizes_kb, kind.size_weights)[0]
        event["size_kb"] = size
        event["payload"] = self._payload(size)
        return event

    def _payload(self, size_kb: float) -> bytes:
        payload = self._payloads.get(size_kb)
        if payload is None:
            payload = self._payloads[size_kb] = bytes(round(size_kb * 1024))
        return payload
