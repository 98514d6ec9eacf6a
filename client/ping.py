"""`hop ping`: an event's time through a network, as a client sees it.

One process holds two connections: a subscriber at the broker the probes should reach
and a publisher at the broker they enter (the same broker by default). The subscriber's
filter matches only this run's probes (`hop_ping = "<name>-<random>"`), so other
subscribers see them only if theirs match every event carrying `hop_ping`. A probe's
latency is its delivery's decode time minus its publish time, both on this process's
clock: brokers on other hosts need no clock agreement, and the time includes both
client links, as any client's would. A probe not delivered within the timeout is lost;
one delivered later is not counted again.
"""

from __future__ import annotations

import secrets
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field

import trio

import client
from broker.netio import host_port
from broker.security import ClientCredentials

PROBE_ATTRIBUTE = "hop_ping"

Address = tuple[str, int]


@dataclass
class Pings:
    """What a run of probes found: each delivered one's latency and path, and the lost."""

    sent: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    lost: list[int] = field(default_factory=list)  # the probes' numbers

    def summary(self, source: Address, target: Address) -> str:
        """ping's closing lines, in one."""
        said = (
            f"{self.sent} probe(s) from {host_port(*source)} to {host_port(*target)}: "
            f"{len(self.latencies_ms)} delivered, {len(self.lost)} lost"
        )
        if self.latencies_ms:
            ms = self.latencies_ms
            said += (
                f"; latency min {min(ms):.3f}, median {statistics.median(ms):.3f}, "
                f"mean {statistics.fmean(ms):.3f}, max {max(ms):.3f} ms"
            )
        return said


async def ping(
    source: Address,
    target: Address,
    count: int | None,
    interval_s: float,
    timeout_s: float,
    name: str,
    credentials: ClientCredentials,
    pings: Pings,
    say: Callable[[str], object],
) -> None:
    """Send `count` probes (None: until cancelled), one each `interval_s` seconds, into
    the network at `source` and take them at `target`, recording each into `pings` and
    saying a line for each."""
    tag = f"{name}-{secrets.token_hex(4)}"
    arrived: dict[int, client.Delivery] = {}
    waiting = trio.Event()

    def take(delivery: client.Delivery) -> None:
        arrived[delivery.attributes["seq"]] = delivery
        waiting.set()

    secret, context = credentials.secret, credentials.ssl_context
    async with (
        client.open_client(*target, name=f"{name}-sub", secret=secret, ssl_context=context) as sub,
        client.open_client(*source, name=f"{name}-pub", secret=secret, ssl_context=context) as pub,
    ):
        await sub.subscribe(f'{PROBE_ATTRIBUTE} = "{tag}"', handler=take)
        start = trio.current_time()
        seq = 0
        while count is None or seq < count:
            await trio.sleep_until(start + seq * interval_s)
            seq += 1
            waiting = trio.Event()
            await pub.publish({PROBE_ATTRIBUTE: tag, "seq": seq})
            pings.sent += 1
            with trio.move_on_after(timeout_s):
                while seq not in arrived:
                    await waiting.wait()
                    waiting = trio.Event()
            delivery = arrived.pop(seq, None)
            arrived.clear()  # (a probe delivered after its timeout)
            if delivery is None:
                pings.lost.append(seq)
                say(f"probe {seq}: lost (not delivered within {timeout_s:g} s)")
                continue
            ms = (delivery.t_deliver_ns - delivery.t_publish_ns) / 1e6
            pings.latencies_ms.append(ms)
            say(f"probe {seq}: {ms:.3f} ms through {'>'.join(delivery.path)}")
