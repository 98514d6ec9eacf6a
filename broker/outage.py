"""When a broker says that its parent cannot be reached.

A child retries its parent with capped backoff until the parent is up, so a network
can start in any order (`hop net` starts its brokers together; across hosts they start
when their hosts do). A refusal in the first seconds is that race, not a fault, and is
not worth a warning; a parent still out of reach after `warn_after_s` is (a wrong
address in the topology, a firewall, a parent that is down), and the operator of a
broker started by hand would otherwise see nothing. So: the first warning comes once
an outage has lasted `warn_after_s` (at once for a parent that refuses the handshake:
a wrong secret, another protocol), the next ones every `repeat_s` while it lasts or at
once when the reason changes, rather than at every attempt, and the reconnection
after a warned outage is logged with its length. Sans-I/O: the broker feeds it the
times and reasons.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Outage:
    """The current run of failed attempts to reach one peer."""

    warn_after_s: float = 5.0
    repeat_s: float = 60.0
    started: float | None = None  # the first failure's time; None: no outage
    attempts: int = 0
    warned: float | None = None  # the last warning's time in this outage
    reason: str = ""

    def failed(self, now: float, reason: str, at_once: bool = False) -> bool:
        """Note a failed attempt at ``now``; True when it is to be warned of. A failure
        that is no start-up race (``at_once``: a refused handshake) is warned of
        without the grace, and then as any other."""
        if self.started is None:
            self.started, self.attempts, self.warned = now, 0, None
        self.attempts += 1
        changed, self.reason = reason != self.reason, reason
        if self.warned is None:
            due = at_once or now - self.started >= self.warn_after_s
        else:
            due = changed or now - self.warned >= self.repeat_s
        if due:
            self.warned = now
        return due

    def lasted(self, now: float) -> float:
        """Seconds since the outage's first failure (0 when there is none)."""
        return 0.0 if self.started is None else now - self.started

    def ended(self, now: float) -> float | None:
        """The peer was reached at ``now``: the outage's length if it was warned of
        (to log with the reconnection), else None. Starts afresh."""
        length = self.lasted(now) if self.warned is not None else None
        self.started, self.attempts, self.warned, self.reason = None, 0, None, ""
        return length
