"""`hop stats --every S`: the rates of a broker or of a whole network, interval by
interval, from two replies of each broker's counters (as vmstat does for a host).

The broker-wide counters (events routed and dropped, CPU seconds) count from the
broker's start. Deliveries and forwards are counted per link, and a link's counters
live as long as the link: one that opened during an interval counts from zero, and one
that closed during it is missing from the second reply, so its events of that interval
are not in the row. A broker whose process changed between two replies (another pid, a
shorter uptime) was restarted: its rates start again from the next interval. The time
of an interval is the broker's own clock (its replies' `time_ns`), so how long the
request took does not move the rates.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TextIO

from broker.messages import ProtocolError
from broker.probe import StatsSession

Stats = dict[str, Any]


@dataclass(frozen=True)
class Rates:
    """One broker's activity over one interval."""

    routed_per_s: float  # events it routed, from clients and from other brokers
    delivered_per_s: float  # events it sent to its clients
    forwarded_per_s: float  # events it sent to other brokers
    dropped: int  # events it dropped during the interval (cycles, full or closed queues)
    cpu_percent: float  # of one core


def rates(before: Stats, after: Stats) -> Rates | None:
    """What the broker did between two of its stats replies; None when it was restarted
    in between (or the replies are not in time order)."""
    seconds = (after["time_ns"] - before["time_ns"]) / 1e9
    if after["pid"] != before["pid"] or after["uptime_s"] < before["uptime_s"] or seconds <= 0:
        return None
    delivered, forwarded, link_drops = _link_changes(before["links"], after["links"])
    return Rates(
        routed_per_s=(after["events_routed"] - before["events_routed"]) / seconds,
        delivered_per_s=delivered / seconds,
        forwarded_per_s=forwarded / seconds,
        dropped=after["events_dropped"] - before["events_dropped"] + link_drops,
        cpu_percent=100.0 * (after["cpu_s"] - before["cpu_s"]) / seconds,
    )


def _link_changes(before: Stats, after: Stats) -> tuple[int, int, int]:
    """Events sent to clients, to brokers, and dropped at links' queues between two
    replies' `links` (a link new in `after` counts from zero)."""
    delivered = forwarded = dropped = 0
    for link_id, now in after.items():
        then = before.get(link_id, {})
        sent = now["events_out"] - then.get("events_out", 0)
        if now["kind"] == "client":
            delivered += sent
        else:
            forwarded += sent
        dropped += now["events_dropped"] - then.get("events_dropped", 0)
    return delivered, forwarded, dropped


def clients(stats: Stats, own_name: str) -> int:
    """The broker's client links, not counting the watch's own."""
    own = f"client:{own_name}#"
    return sum(
        1
        for link_id, link in stats["links"].items()
        if link["kind"] == "client" and not link_id.startswith(own)
    )


def parent_state(stats: Stats) -> str:
    """'root', 'up', or 'down: why' (the broker's own account of its parent link)."""
    if not stats["parent"]:
        return "root"
    if stats["parent_connected"]:
        return "up"
    return f"down {stats['parent_unreachable_s']:g} s: {stats['parent_problem'] or 'connecting'}"


COLUMNS = (
    ("routed/s", 9),
    ("delivered/s", 12),
    ("forwarded/s", 12),
    ("dropped", 8),
    ("subs", 6),
    ("clients", 8),
    ("queued", 7),
    ("cpu %", 6),
)


def header(label_width: int) -> str:
    """The table's column names."""
    cells = "".join(name.rjust(width) for name, width in COLUMNS)
    return f"{'time':<9} {'broker':<{label_width}} {cells}  parent"


def row(when: str, label: str, label_width: int, before: Stats, after: Stats, own_name: str) -> str:
    """One broker's line of an interval."""
    start = f"{when:<9} {label:<{label_width}} "
    found = rates(before, after)
    if found is None:
        return f"{start}  restarted: rates from the next interval"
    values = (
        f"{found.routed_per_s:.1f}",
        f"{found.delivered_per_s:.1f}",
        f"{found.forwarded_per_s:.1f}",
        str(found.dropped),
        str(after["subscriptions"]),
        str(clients(after, own_name)),
        str(sum(link["queue_depth"] for link in after["links"].values())),
        f"{found.cpu_percent:.1f}",
    )
    cells = "".join(value.rjust(width) for value, (_, width) in zip(values, COLUMNS, strict=True))
    return f"{start}{cells}  {parent_state(after)}"


def problem_row(when: str, label: str, label_width: int, reason: str) -> str:
    """The line of a broker that gave no counters this interval."""
    return f"{when:<9} {label:<{label_width}}  {reason}"


class Target:
    """A broker to watch: how the table names it, and a connection to ask it for its
    counters, kept from one interval to the next (so the broker logs one link for the
    whole watch)."""

    def __init__(self, label: str, connect: Callable[[], StatsSession]) -> None:
        self.label = label
        self._connect = connect
        self._session: StatsSession | None = None

    def ask(self) -> Stats:
        """The counters now; OSError or ProtocolError when the broker gives none. A
        connection that answered before and fails now (the broker cut a link quiet for
        longer than its heartbeat timeout, or restarted) is made again once."""
        if self._session is not None:
            try:
                return self._session.ask()
            except (OSError, ProtocolError):
                self._session = None
        self._session = self._connect()
        try:
            return self._session.ask()
        except (OSError, ProtocolError):
            self._session = None
            raise

    def close(self) -> None:
        """Say Bye to the broker, if connected."""
        if self._session is not None:
            self._session.close()
            self._session = None


def watch(
    targets: Sequence[Target],
    every_s: float,
    intervals: int | None,
    out: TextIO,
    own_name: str,
    unanswered: Callable[[Exception], str],
) -> bool:
    """Print a row per broker every `every_s` seconds, `intervals` times (None: until
    interrupted); the brokers are asked at once, each on its own thread. Returns whether
    every broker answered every time."""
    width = max(len("broker"), *(len(t.label) for t in targets))
    out.write(header(width) + "\n")
    out.flush()
    previous: dict[str, Stats] = {}
    all_answered = True
    pool = ThreadPoolExecutor(max_workers=len(targets), thread_name_prefix="stats")
    try:
        for tick in _ticks(every_s, intervals):
            replies = list(pool.map(_answer, targets))
            when = datetime.fromtimestamp(tick).strftime("%H:%M:%S")
            lines = []
            for target, reply in zip(targets, replies, strict=True):
                if isinstance(reply, Exception):
                    all_answered = False
                    previous.pop(target.label, None)
                    lines.append(problem_row(when, target.label, width, unanswered(reply)))
                    continue
                before = previous.get(target.label)
                previous[target.label] = reply
                if before is not None:
                    lines.append(row(when, target.label, width, before, reply, own_name))
            if lines:
                out.write("".join(line + "\n" for line in lines))
                out.flush()
    finally:
        pool.shutdown(cancel_futures=True)
        for target in targets:
            target.close()
    return all_answered


def _answer(target: Target) -> Stats | Exception:
    try:
        return target.ask()
    except (OSError, ProtocolError) as exc:
        return exc


def _ticks(every_s: float, intervals: int | None) -> Iterator[float]:
    """The wall-clock time of each sample, on a fixed grid from now (no drift): one
    sample first as the baseline, then one per interval."""
    start = time.monotonic()
    wall = time.time() - start
    samples = None if intervals is None else intervals + 1
    k = 0
    while samples is None or k < samples:
        due = start + k * every_s
        time.sleep(max(0.0, due - time.monotonic()))
        yield wall + time.monotonic()
        k += 1
