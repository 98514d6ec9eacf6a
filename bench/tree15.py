"""tree15: the saturation rate of the 15-broker case study on this machine.

The network of ``topologies/siena15.toml`` (15 brokers, one process each, moved to
free loopback ports; tracing off) with its 16 subscribers (one subscription per
wanted product family) and 8 publishers (Poisson arrivals, SPECjms2007 event sizes,
seeded: ``monitor.workload.EventGenerator``), all clients as trio tasks in this
process. Every process shares the machine's cores.

The total publication rate is raised step by step, every publisher's rate scaled by
the same factor (doubling from twice the case study's rates, then bisecting between
the last step that passed and the first that failed). A step publishes for a
warm-up and a measurement period, then waits for its deliveries; it fails when the
delivery latency p99 of the events published in its measurement period exceeds
100 ms, when any delivery its events were due (computed from the subscribers'
filters with ``routing.MatchIndex``) has not arrived within DRAIN_S after the step,
or when the publishers fell behind: the step took longer than planned by more than
1 / MIN_ACHIEVED (they publish on a schedule and catch up when late, so a host too
busy to keep up shows as a longer step, a lower achieved rate, while the latencies,
stamped at publication, stay low; a count of publications would also move with the
Poisson draws).
The saturation rate is the total rate of the highest step that passed. Latency is
``time.time_ns()`` at decode in the subscriber minus the publisher's stamp. The
fraction of a core this process used is reported per step, to show whether the
driver, rather than the brokers, was the limit. There is no baseline to alternate
with (none is defined) and one search is made per run.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

import client
from bench.common import write_result
from bench.throughput import latency_summary, retry_ports, start_network_on
from broker.local_network import REPO, Network
from broker.process import unwind_on_termination
from monitor.workload import EventGenerator
from routing import MatchIndex, parse_filter
from topologies import CaseStudy, load_case_study
from topologies.model import PublisherSpec, Workload

STUDY_FILE = REPO / "topologies" / "siena15.toml"
P99_LIMIT_US = 100_000.0
FIRST_SCALE = 2.0
MAX_SCALE = 256.0
MIN_SCALE = 0.25
DRAIN_S = 5.0
MIN_ACHIEVED = 0.95  # of the step's total rate, as the planned over the actual duration


@dataclass
class Step:
    """What one step published and what arrived (all counters per step)."""

    scale: float
    published: int = 0
    expected: int = 0  # deliveries due: one per (event, subscriber whose filters match)
    delivered: int = 0
    latencies_ns: list[int] = field(default_factory=list)  # measurement period only


class Driver:
    """The case study's clients, connected once and reused by every step."""

    def __init__(self, study: CaseStudy, network: Network) -> None:
        self.study = study
        self.network = network
        self.workload = study.workload or Workload()
        self.base_rates = study.rates_for(None)
        self.index: MatchIndex[tuple[int, int]] = MatchIndex()
        for spec in study.subscribers.values():
            for j, text in enumerate(spec.filters):
                self.index.add((spec.id, j), parse_filter(text))
        self.steps: list[Step] = []
        self.publishers: list[tuple[client.AsyncClient, PublisherSpec]] = []

    async def connect(self, stack: AsyncExitStack, nursery: trio.Nursery) -> None:
        """Connect every subscriber (subscriptions in force) and publisher."""
        for spec in self.study.subscribers.values():
            c = await stack.enter_async_context(
                client.open_client(*self.network.address(spec.broker), name=f"sub{spec.id}")
            )
            for text in spec.filters:
                nursery.start_soon(self._receive, await c.subscribe(text))
        for publisher_spec in self.study.publishers.values():
            c = await stack.enter_async_context(
                client.open_client(
                    *self.network.address(publisher_spec.broker), name=f"pub{publisher_spec.id}"
                )
            )
            self.publishers.append((c, publisher_spec))

    async def _receive(self, sub: client.AsyncSubscription) -> None:
        """Count deliveries per step, once per connection (by its first matching
        subscription), and keep the latency of measured events."""
        while True:
            try:
                batch = await sub.next_batch()
            except client.ClientError:
                return
            for d in batch:
                if d.sub_ids[0] != sub.id:
                    continue
                step = self.steps[d.attributes["step"]]
                step.delivered += 1
                if d.attributes["measured"]:
                    step.latencies_ns.append(d.t_deliver_ns - d.t_publish_ns)

    async def _publish(
        self,
        c: client.AsyncClient,
        generator: EventGenerator,
        step_index: int,
        times: tuple[float, float],
    ) -> None:
        """Poisson publications on trio's clock until the end of the step."""
        measure_at, stop_at = times
        step = self.steps[step_index]
        next_at = trio.current_time()
        while True:
            next_at += generator.interarrival_s()
            if next_at >= stop_at:
                return
            await trio.sleep_until(next_at)
            event = generator.event()
            event["step"] = step_index
            event["measured"] = next_at >= measure_at
            step.expected += len({sub_id for sub_id, _ in self.index.match(event)})
            step.published += 1
            await c.publish(event)

    async def run_step(self, scale: float, warmup_s: float, measure_s: float) -> dict[str, Any]:
        step_index = len(self.steps)
        step = Step(scale)
        self.steps.append(step)
        start = trio.current_time()
        times = (start + warmup_s, start + warmup_s + measure_s)
        cpu_before = time.process_time()
        async with trio.open_nursery() as nursery:
            for c, spec in self.publishers:
                rate = self.base_rates[spec.id] * scale
                generator = EventGenerator(self.workload, spec, rate)
                nursery.start_soon(self._publish, c, generator, step_index, times)
        wall = trio.current_time() - start  # longer than planned when publishers lag
        cpu = time.process_time() - cpu_before
        await self._drain(step)
        target = sum(self.base_rates.values()) * scale
        summary = latency_summary(step.latencies_ns)
        p99 = summary["p99_us"]
        undelivered = step.expected - step.delivered
        return {
            "scale": round(scale, 3),
            "target_rate": round(target, 1),
            "achieved_rate": round(step.published / wall, 1),
            "published": step.published,
            "expected_deliveries": step.expected,
            "delivered": step.delivered,
            "undelivered": undelivered,
            **summary,
            "client_cpu_percent": round(100 * cpu / wall, 1),
            "passed": (
                undelivered == 0
                and p99 is not None
                and p99 <= P99_LIMIT_US
                and wall <= (warmup_s + measure_s) / MIN_ACHIEVED
            ),
        }

    async def _drain(self, step: Step) -> None:
        """Wait until every due delivery arrived, at most DRAIN_S."""
        with trio.move_on_after(DRAIN_S):
            while step.delivered < step.expected:
                await trio.sleep(0.05)


async def bracket(
    try_scale: Callable[[float], Awaitable[bool]],
) -> tuple[float | None, float | None]:
    """Double the scale from FIRST_SCALE while steps pass (halve it while they fail);
    return the last scale that passed and the first that failed (None: none did)."""
    passed: float | None = None
    failed: float | None = None
    scale = FIRST_SCALE
    while MIN_SCALE <= scale <= MAX_SCALE:
        if await try_scale(scale):
            passed = scale
            if failed is not None:
                break
            scale *= 2
        else:
            failed = scale
            if passed is not None:
                break
            scale /= 2
    return passed, failed


async def search(
    study: CaseStudy, network: Network, warmup_s: float, measure_s: float, refine: int
) -> dict[str, Any]:
    driver = Driver(study, network)
    steps: list[dict[str, Any]] = []

    async def try_scale(scale: float) -> bool:
        result = await driver.run_step(scale, warmup_s, measure_s)
        steps.append(result)
        print(
            f"tree15 x{scale:.2f}: {result['target_rate']:.0f} events/s "
            f"({result['achieved_rate']:.0f} achieved), p99 "
            f"{result['p99_us']} us, undelivered {result['undelivered']}, "
            f"client CPU {result['client_cpu_percent']} % -> "
            f"{'pass' if result['passed'] else 'fail'}",
            file=sys.stderr,
        )
        return result["passed"]

    async with trio.open_nursery() as nursery:
        async with AsyncExitStack() as stack:
            await driver.connect(stack, nursery)
            passed, failed = await bracket(try_scale)
            for _ in range(refine):
                if passed is None or failed is None:
                    break
                middle = (passed * failed) ** 0.5
                if await try_scale(middle):
                    passed = middle
                else:
                    failed = middle
        nursery.cancel_scope.cancel()  # the receivers end with their connections anyway
    base = sum(driver.base_rates.values())
    best = max((s for s in steps if s["passed"]), key=lambda s: s["scale"], default=None)
    return {
        "base_rate": round(base, 1),
        "saturation_rate": best["target_rate"] if best else None,
        "saturation_achieved_rate": best["achieved_rate"] if best else None,
        "first_failing_rate": round(base * failed, 1) if failed is not None else None,
        "steps": steps,
    }


def run(quick: bool, workdir: Path) -> dict[str, Any]:
    """Start the 15 brokers, search the saturation rate, stop them (by PID)."""
    warmup_s, measure_s, refine = (0.5, 2.0, 1) if quick else (1.0, 5.0, 3)
    study = load_case_study(STUDY_FILE, filter_parser=parse_filter)
    network = retry_ports(lambda: start_network_on(Network.from_file("siena15", workdir)))
    try:
        found = trio.run(search, study, network, warmup_s, measure_s, refine)
    finally:
        network.stop()
    return {
        "study": STUDY_FILE.name,
        "brokers": len(study.topology.brokers),
        "subscribers": len(study.subscribers),
        "subscriptions": sum(len(s.filters) for s in study.subscribers.values()),
        "publishers": len(study.publishers),
        "criterion": (
            f"p99 <= {P99_LIMIT_US / 1000:.0f} ms, all deliveries within {DRAIN_S} s, "
            f"and at least {MIN_ACHIEVED:.0%} of the rate achieved"
        ),
        "warmup_s": warmup_s,
        "measure_s": measure_s,
        **found,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter steps, one bisection")
    args = parser.parse_args(argv)
    unwind_on_termination()  # stop what it started also when killed with SIGTERM
    with tempfile.TemporaryDirectory(prefix="bench-tree15-") as tmp:
        result = run(args.quick, Path(tmp))
    print(write_result("tree15", result))


if __name__ == "__main__":
    main()
