"""Soak: the 15-broker case study under its scenario-1 load for HOP_SOAK_MINUTES
(default 10) minutes, one broker killed (-9) and restarted every minute.

Checks that every event published while the whole network was up (and not just
before a kill) reaches every matching subscriber exactly once, and that the brokers'
memory stays flat: each broker's largest RSS in the last minute is within a margin
of its largest RSS in the second minute (the first is warm-up). Run by `make soak`.
"""

from __future__ import annotations

import contextlib
import os
from collections import defaultdict
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import trio

import client
from broker.local_network import REPO, Network
from monitor.workload import EventGenerator
from routing import parse_filter
from topologies import CaseStudy, load_case_study

pytestmark = [pytest.mark.slow, pytest.mark.integration]

MINUTES = float(os.environ.get("HOP_SOAK_MINUTES", "10"))
KILL_AT_S = 20.0  # into each minute
VICTIMS = [2, 12, 5, 1, 9, 7, 3, 14, 6, 11, 4, 15, 8, 10, 13]
IN_FLIGHT_S = 2.0  # events published this close before a kill may be lost with it
RSS_MARGIN = 1.25  # last minute's peak RSS may exceed the second minute's by 25 % ...
RSS_SLACK_MB = 10.0  # ... plus this much
POLICY = client.Reconnect(initial_s=0.05, max_s=0.5, wait_s=30.0)


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def routing_state(net: Network) -> dict[int, tuple]:
    out = {}
    for b in net.topology.brokers:
        s = net.stats(b)
        out[b] = (s["parent_connected"], s["subscriptions"], s["forwarded"])
    return out


@dataclass
class Log:
    """What happened, in trio.current_time() seconds."""

    published: list[tuple[float, str, dict]] = field(default_factory=list)
    kills: list[float] = field(default_factory=list)
    recoveries: list[float] = field(default_factory=list)
    received: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    rss: dict[int, list[tuple[float, float]]] = field(default_factory=lambda: defaultdict(list))
    start: float = 0.0

    def stable_at(self, t: float) -> bool:
        """Whether the network was whole at `t` and stayed so long enough after."""
        for kill, recovered in zip(self.kills, self.recoveries + [float("inf")], strict=False):
            if kill - IN_FLIGHT_S <= t <= recovered:
                return False
        return True


@pytest.mark.needs("procfs")
def test_soak_restarts_lose_nothing_while_up_and_memory_stays_flat(tmp_path: Path) -> None:
    study = load_case_study(REPO / "topologies" / "siena15.toml", filter_parser=parse_filter)
    net = Network.from_file("siena15", tmp_path)
    rates = study.rates_for("s1")
    log = Log()
    try:
        net.start()
        trio.run(_soak, net, study, rates, log)
    finally:
        codes = net.stop()
    assert all(code == 0 for code in codes.values()), (codes, net.log_text()[-3000:])
    assert len(log.recoveries) == len(log.kills) >= int(MINUTES)
    _check_deliveries(study, log)
    _check_memory(log)


async def _soak(net: Network, study: CaseStudy, rates: dict[int, float], log: Log) -> None:
    duration = MINUTES * 60
    async with trio.open_nursery() as nursery, AsyncExitStack() as stack:
        for sub in study.subscribers.values():
            name = f"sub-{sub.id}"
            cm = client.open_client(*net.address(sub.broker), name=name, reconnect=POLICY)
            c = await stack.enter_async_context(cm)
            for f in sub.filters:
                nursery.start_soon(_record, await c.subscribe(f), log.received[name])
        pubs = []
        for spec in study.publishers.values():
            address = net.address(spec.broker)
            cm = client.open_client(*address, name=f"pub-{spec.id}", reconnect=POLICY)
            pubs.append((await stack.enter_async_context(cm), spec))
        baseline = await trio.to_thread.run_sync(routing_state, net)
        log.start = trio.current_time()
        for c, spec in pubs:
            gen = EventGenerator(study.workload, spec, rates[spec.id])
            nursery.start_soon(_publish, c, gen, log)
        nursery.start_soon(_sample_rss, net, log)
        minute = 0
        while minute * 60 + KILL_AT_S < duration:
            await trio.sleep_until(log.start + minute * 60 + KILL_AT_S)
            victim = VICTIMS[minute % len(VICTIMS)]
            log.kills.append(trio.current_time())
            await trio.to_thread.run_sync(net.kill, victim)
            await trio.to_thread.run_sync(net.restart, victim)
            with trio.fail_after(60):
                while await trio.to_thread.run_sync(routing_state, net) != baseline:
                    await trio.sleep(0.2)
            log.recoveries.append(trio.current_time())
            minute += 1
        await trio.sleep_until(log.start + duration)
        nursery.cancel_scope.cancel()


async def _publish(c: client.AsyncClient, gen: EventGenerator, log: Log) -> None:
    while True:
        await trio.sleep(gen.interarrival_s())
        event = gen.event()
        try:
            event_id = await c.publish(event)
        except client.ConnectionLost:
            continue
        log.published.append((trio.current_time(), event_id, event))


async def _record(sub: client.AsyncSubscription, out: list[str]) -> None:
    while True:
        try:
            out.append((await sub.next_delivery()).event_id)
        except client.ClientError:
            return


async def _sample_rss(net: Network, log: Log) -> None:
    while True:
        now = trio.current_time() - log.start
        for broker_id, proc in list(net.procs.procs.items()):
            if proc.poll() is None:
                with contextlib.suppress(FileNotFoundError):  # killed after the poll
                    log.rss[broker_id].append((now, rss_mb(proc.pid)))
        await trio.sleep(2.0)


def _check_deliveries(study: CaseStudy, log: Log) -> None:
    # Events of the last seconds may still be in flight when the clients close.
    end = log.start + MINUTES * 60 - IN_FLIGHT_S
    stable = [(eid, e) for t, eid, e in log.published if t < end and log.stable_at(t)]
    assert len(stable) > 0.5 * len(log.published)
    for sub in study.subscribers.values():
        name = f"sub-{sub.id}"
        filters = [parse_filter(f) for f in sub.filters]
        got: dict[str, int] = defaultdict(int)
        for eid in log.received[name]:
            got[eid] += 1
        for eid, event in stable:
            wanted = sum(f.matches(event) for f in filters)  # one delivery per subscription
            assert got.get(eid, 0) == wanted, (name, eid, got.get(eid, 0), wanted)


def _check_memory(log: Log) -> None:
    """Peak RSS per broker: the last minute against the second (for runs shorter than
    three minutes, against the first minute after its first KILL_AT_S seconds)."""
    reference = (60, 120) if MINUTES >= 3 else (KILL_AT_S, 60)
    last = (MINUTES - 1) * 60
    for broker_id, samples in log.rss.items():
        before = [rss for t, rss in samples if reference[0] <= t < reference[1]]
        final = [rss for t, rss in samples if t >= last]
        if before and final:
            limit = max(before) * RSS_MARGIN + RSS_SLACK_MB
            assert max(final) <= limit, (broker_id, max(before), max(final))
