"""Which process limits a fan-out: CPU per event of the broker and of the client
process at saturation, with `bench.throughput`'s 1-to-N workload (one broker holding
1000 subscriptions, one publisher and N subscribers of our trio client in this one
process, 150-byte events).

`bench.throughput` reports the events per second; this says where they are bounded.
On 2 cores the broker and the client process each get about one, so the one using
more CPU per event is the limit: at 1-to-4 the client process decodes four deliveries
per event it publishes. Medians over repetitions, each on a fresh broker.
Run: ``python -m bench.fanout_cpu [--subscribers N] [--events E] [--reps R]``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import trio

from bench.common import median, write_result
from bench.throughput import (
    SATURATION_TIME_LIMIT_S,
    TOTAL_SUBSCRIPTIONS,
    HopSystem,
    saturation,
)
from monitor.replay import process_cpu_s


async def measure(system: HopSystem, subscribers: int, events: int) -> dict[str, float]:
    """One saturation run (after a warm-up of a tenth as many events): delivered
    events/s and each process's CPU microseconds per published event."""
    async with AsyncExitStack() as stack:
        await system.install_filler(stack, TOTAL_SUBSCRIPTIONS - subscribers)
        pub = await system.publisher(stack)
        subs = [await system.subscriber(stack) for _ in range(subscribers)]
        await saturation(pub, subs, 0, max(100, events // 10), SATURATION_TIME_LIMIT_S)
        broker_before, client_before = process_cpu_s(system.pid()), time.process_time()
        result = await saturation(pub, subs, 10 * events, events, SATURATION_TIME_LIMIT_S)
        broker_cpu = process_cpu_s(system.pid()) - broker_before
        client_cpu = time.process_time() - client_before
    if result["lost"]:
        raise RuntimeError(f"{result['lost']} deliveries missing at saturation")
    return {
        "events_per_s": result["events_per_s"],
        "broker_cpu_us_per_event": broker_cpu / events * 1e6,
        "client_cpu_us_per_event": client_cpu / events * 1e6,
    }


def run(subscribers: int, events: int, reps: int) -> dict[str, Any]:
    samples = []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(reps):
            system = HopSystem()
            system.start(Path(tmp))
            try:
                samples.append(trio.run(measure, system, subscribers, events))
            finally:
                system.stop()
    medians = {key: round(median([s[key] for s in samples]), 1) for key in samples[0]}
    limit = (
        "client"
        if medians["client_cpu_us_per_event"] > medians["broker_cpu_us_per_event"]
        else "broker"
    )
    return {
        "subscribers": subscribers,
        "events": events,
        "repetitions": reps,
        **medians,
        "limited_by": limit,
        "samples": samples,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subscribers", type=int, default=4, help="the fan-out N")
    parser.add_argument("--events", type=int, default=60_000, help="events per repetition")
    parser.add_argument("--reps", type=int, default=3, help="repetitions, fresh broker each")
    args = parser.parse_args(argv)
    result = run(args.subscribers, args.events, args.reps)
    print(write_result(f"fanout_cpu_{args.subscribers}", result))
    print(
        f"1-to-{args.subscribers}: {result['events_per_s']} events/s; CPU per event: broker "
        f"{result['broker_cpu_us_per_event']} us, client process "
        f"{result['client_cpu_us_per_event']} us (limited by the {result['limited_by']})"
    )


if __name__ == "__main__":
    main()
