"""Heartbeats that do not blame a peer for this side's own pause.

A heartbeat task sleeps, then judges a peer by how long ago something was last read
from it. If this process did not run meanwhile (stopped by Ctrl-Z or a debugger, its
VM paused, its event loop held by a long computation), that gap is the process's own:
the peer's messages wait unread in the socket, and a quiet peer was not pinged. So the
time a heartbeat's sleep overran is added to the peer's last-heard time before judging
it; without it, every link of a network resumed after a pause longer than the
heartbeat timeout was cut, clients included, though every peer was alive.
"""

from __future__ import annotations


def overrun(slept_from: float, seconds: float, now: float) -> float:
    """How much longer than `seconds` a sleep begun at `slept_from` took, ending at `now`
    (both `time.monotonic()`): time this process did not run when it should have."""
    return max(0.0, now - slept_from - seconds)
