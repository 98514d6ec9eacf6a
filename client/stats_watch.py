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

Each broker is asked over one connection kept from one interval to the next, as long
as the intervals are shorter than `KEEP_CONNECTION_S`: a longer silence would have the
broker cut it as a silent peer (its heartbeat timeout, 15 s by default), so for longer
intervals each request has a connection of its own, closed with a Bye.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any, TextIO

from broker.messages import ProtocolError
from broker.probe import StatsSession

Stats = dict[str, Any]

KEEP_CONNECTION_S = 10.0


@dataclass(frozen=True)
class Rates:
    """One broker's activity over one interval."""

    routed_per_s: float  # events it routed, from clients and from other brokers
    delivered_per_s: float  # events it sent to its clients
    forwarded_per_s: float  # events it sent to other brokers
    dropped: int  # events that missed a target in the interval (a cycle, a full queue...)
    cpu_percent: float  # of one core


def rates(before: Stats, after: Stats) -> Rates | None:
    """What the broker did between two of its stats replies; None when it was restarted
    in between (or the replies are not in time order)."""
    seconds = (after["time_ns"] - before["time_ns"]) / 1e9
    if after["pid"] != before["pid"] or after["uptime_s"] < before["uptime_s"] or seconds <= 0:
        return None
    delivered, forwarded = _link_changes(before["links"], after["links"])
    return Rates(
        routed_per_s=(after["events_routed"] - before["events_routed"]) / seconds,
        delivered_per_s=delivered / seconds,
        forwarded_per_s=forwarded / seconds,
        # (the broker's count: a link's own counts a queue-full drop that is in it too)
        dropped=after["events_dropped"] - before["events_dropped"],
        cpu_percent=100.0 * (after["cpu_s"] - before["cpu_s"]) / seconds,
    )


def _link_changes(before: Stats, after: Stats) -> tuple[int, int]:
    """Events sent to clients and to brokers between two replies' `links` (a link new
    in `after` counts from zero)."""
    delivered = forwarded = 0
    for link_id, now in after.items():
        then = before.get(link_id, {})
        sent = now["events_out"] - then.get("events_out", 0)
        if now["kind"] == "client":
            delivered += sent
        else:
            forwarded += sent
    return delivered, forwarded


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


@dataclass(frozen=True)
class Reading:
    """What a broker's line of an interval says: its rates and state, or, when it has
    none, why: it did not answer (`problem`), or it was restarted."""

    rates: Rates | None = None
    subscriptions: int = 0
    clients: int = 0
    queued: int = 0  # frames waiting in its links' queues
    parent: str = ""  # parent_state
    problem: str = ""
    restarted: bool = False


def reading(before: Stats, after: Stats, own_name: str) -> Reading:
    """A broker's line of the interval between two of its replies."""
    found = rates(before, after)
    if found is None:
        return Reading(restarted=True)
    return Reading(
        rates=found,
        subscriptions=after["subscriptions"],
        clients=clients(after, own_name),
        queued=sum(link["queue_depth"] for link in after["links"].values()),
        parent=parent_state(after),
    )


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


def table_line(when: str, label: str, label_width: int, line: Reading) -> str:
    """A broker's line of an interval in the table."""
    start = f"{when:<9} {label:<{label_width}} "
    found = line.rates
    if found is None:
        return f"{start} " + (
            "restarted: rates from the next interval" if line.restarted else line.problem
        )
    values = (
        f"{found.routed_per_s:.1f}",
        f"{found.delivered_per_s:.1f}",
        f"{found.forwarded_per_s:.1f}",
        str(found.dropped),
        str(line.subscriptions),
        str(line.clients),
        str(line.queued),
        f"{found.cpu_percent:.1f}",
    )
    cells = "".join(value.rjust(width) for value, (_, width) in zip(values, COLUMNS, strict=True))
    return f"{start}{cells}  {line.parent}"


def json_value(line: Reading) -> dict[str, Any]:
    """A broker's line of an interval as `--json` gives it: the rates and state, or
    `{"error": why}` (as `hop stats FILE` gives a broker that did not answer), or
    `{"restarted": true}`."""
    if line.rates is None:
        return {"restarted": True} if line.restarted else {"error": line.problem}
    return {
        **asdict(line.rates),
        "subscriptions": line.subscriptions,
        "clients": line.clients,
        "queued": line.queued,
        "parent": line.parent,
    }


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
    *,
    as_json: bool = False,
) -> bool:
    """Write each broker's line every `every_s` seconds, `intervals` times (None: until
    interrupted), as a table or (`as_json`) one JSON object per interval; the brokers
    are asked at once, each on its own thread. A broker that does not answer is told at
    once, also at the first request (the others' first lines need a second one). Returns
    whether every broker answered every time."""
    width = max(len("broker"), *(len(t.label) for t in targets))
    if not as_json:
        _write(out, [header(width)])
    previous: dict[str, Stats] = {}
    all_answered = True
    pool = ThreadPoolExecutor(max_workers=len(targets), thread_name_prefix="stats")
    try:
        for tick in sample_times(every_s, intervals):
            replies = list(pool.map(_answer, targets))
            lines: dict[str, Reading] = {}
            for target, reply in zip(targets, replies, strict=True):
                if isinstance(reply, Exception):
                    all_answered = False
                    previous.pop(target.label, None)
                    lines[target.label] = Reading(problem=unanswered(reply))
                    continue
                before = previous.get(target.label)
                previous[target.label] = reply
                if before is not None:
                    lines[target.label] = reading(before, reply, own_name)
            if every_s > KEEP_CONNECTION_S:
                for target in targets:
                    target.close()
            if not lines:
                continue
            if as_json:
                when = datetime.fromtimestamp(tick, UTC).isoformat(timespec="seconds")
                brokers = {label: json_value(line) for label, line in lines.items()}
                _write(out, [json.dumps({"time": when, "brokers": brokers})])
            else:
                when = datetime.fromtimestamp(tick).strftime("%H:%M:%S")
                _write(out, [table_line(when, lb, width, line) for lb, line in lines.items()])
    finally:
        pool.shutdown(cancel_futures=True)
        for target in targets:
            target.close()
    return all_answered


def _write(out: TextIO, lines: list[str]) -> None:
    out.write("".join(line + "\n" for line in lines))
    out.flush()


def _answer(target: Target) -> Stats | Exception:
    try:
        return target.ask()
    except (OSError, ProtocolError) as exc:
        return exc


def sample_times(every_s: float, intervals: int | None) -> Iterator[float]:
    """The wall-clock time of each sample, on a fixed grid from now (no drift): one
    sample first as the baseline, then one per interval. Points of the grid already
    past when a sample ends (a broker slow to answer) are skipped, not made up for in a
    burst: the intervals' rates are over their real spans anyway."""
    start = time.monotonic()
    wall = time.time() - start
    samples = None if intervals is None else intervals + 1
    taken = point = 0
    while samples is None or taken < samples:
        time.sleep(max(0.0, start + point * every_s - time.monotonic()))
        yield wall + time.monotonic()
        taken += 1
        point = max(point + 1, math.floor((time.monotonic() - start) / every_s) + 1)
