"""Visit ratios from routing probabilities (thesis eq. 4.3), one small system per class.

For an event class (type t, publisher k), nu[i][j] is the fraction of the class's
events at broker i that i forwarded to j, and e[j] the fraction of its events that
entered the network at j (the publisher's home broker; several if the publisher
moved). The visit ratios solve V = e + V nu, i.e. (I - nu^T) V = e. Content-based
routing multicasts, so rows of nu may sum to more than 1; the equation still gives
the expected visits per published event as long as forwarding cannot loop forever
(spectral radius of nu below 1), which holds on trees.

With complete traces the counted visit ratios (visits / publications) satisfy the
same equations exactly (every arrival is an entry or a recorded forward), so the two
differ only when records are missing or extra: lost or truncated trace files, events
forwarded to a broker that never recorded them, publications without a hop at the
home broker.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class ClassRouting:
    """What the traces say about one class: counts per broker and per forwarding edge."""

    arrived: dict[str, int] = field(default_factory=dict)  # broker -> events there
    entered: dict[str, int] = field(default_factory=dict)  # broker -> events from local clients
    forwarded: dict[tuple[str, str], int] = field(default_factory=dict)  # (i, j) -> forwards


def solve_visit_ratios(routing: ClassRouting) -> tuple[dict[str, float], str | None]:
    """Visit ratio per broker, and a problem description when there is no usable solution
    (then the ratios are NaN)."""
    brokers = sorted(
        set(routing.arrived) | set(routing.entered) | {j for _, j in routing.forwarded}
    )
    index = {b: n for n, b in enumerate(brokers)}
    nu = np.zeros((len(brokers), len(brokers)))
    for (i, j), count in routing.forwarded.items():
        nu[index[i], index[j]] = count / routing.arrived[i]
    entries = sum(routing.entered.values())
    nan = {b: float("nan") for b in brokers}
    if entries == 0:
        return nan, "no event entered at a home broker (no hop from a local publisher client)"
    e = np.zeros(len(brokers))
    for b, count in routing.entered.items():
        e[index[b]] = count / entries
    radius = max(abs(np.linalg.eigvals(nu))) if len(brokers) else 0.0
    if radius >= 1.0:
        return nan, f"forwarding loops without end (spectral radius of nu {radius:.3f} >= 1)"
    visits = np.linalg.solve(np.eye(len(brokers)) - nu.T, e)
    return {b: float(visits[index[b]]) for b in brokers}, None
