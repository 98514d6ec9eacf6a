"""Which process limits a fan-out: CPU per event of the broker and of the client
process at saturation, with `bench.throughput`'s 1-to-N workload (one broker holding
1000 subscriptions, one publisher and N subscribers of our trio client in this one
process, 150-byte events).

`bench.throughput` reports the events per second; this says where they are bounded.
On 2 cores the broker and the client process each get about one, so the one using
more CPU per event is the limit: at 1-to-4 the client process decodes four deliveries
per event it publishes. Medians over repetitions, each on a fresh broker.

``--gc`` sets Python's cyclic garbage collector in this (the client's) process for
the measured runs, to show its share of the client's CPU: ``default`` leaves it as a
user's process has it, ``tuned`` does what a high-rate subscriber can do (freeze the
start-up heap, ``gc.freeze()``, and collect the youngest generation every
GC_TUNED_THRESHOLD allocations instead of 700), ``off`` disables it. The broker
process is not touched (it freezes its start-up heap itself).
Run: ``python -m bench.fanout_cpu [--subscribers N] [--events E] [--reps R]
[--gc default|tuned|off]``.
"""

from __future__ import annotations

import argparse
import gc
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
from broker.process import process_cpu_s, unwind_on_termination

GC_MODES = ("default", "tuned", "off")
GC_TUNED_THRESHOLD = 50_000
_GC_DEFAULT = gc.get_threshold()


def _set_gc(mode: str) -> None:
    if mode == "default":
        gc.enable()
        gc.set_threshold(*_GC_DEFAULT)
    elif mode == "tuned":
        gc.enable()
        gc.freeze()
        gc.set_threshold(GC_TUNED_THRESHOLD, *_GC_DEFAULT[1:])
    else:
        gc.disable()


async def measure(
    system: HopSystem, subscribers: int, events: int, gc_mode: str = "default"
) -> dict[str, float]:
    """One saturation run (after a warm-up of a tenth as many events): delivered
    events/s and each process's CPU microseconds per published event."""
    async with AsyncExitStack() as stack:
        await system.install_filler(stack, TOTAL_SUBSCRIPTIONS - subscribers)
        pub = await system.publisher(stack)
        subs = [await system.subscriber(stack) for _ in range(subscribers)]
        await saturation(pub, subs, 0, max(100, events // 10), SATURATION_TIME_LIMIT_S)
        _set_gc(gc_mode)
        try:
            broker_before, client_before = process_cpu_s(system.pid()), time.process_time()
            result = await saturation(pub, subs, 10 * events, events, SATURATION_TIME_LIMIT_S)
            broker_cpu = process_cpu_s(system.pid()) - broker_before
            client_cpu = time.process_time() - client_before
        finally:
            gc.unfreeze()
            _set_gc("default")
    if result["lost"]:
        raise RuntimeError(f"{result['lost']} deliveries missing at saturation")
    return {
        "events_per_s": result["events_per_s"],
        "broker_cpu_us_per_event": broker_cpu / events * 1e6,
        "client_cpu_us_per_event": client_cpu / events * 1e6,
    }


def run(subscribers: int, events: int, reps: int, gc_mode: str = "default") -> dict[str, Any]:
    samples = []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(reps):
            system = HopSystem()
            system.start(Path(tmp))
            try:
                samples.append(trio.run(measure, system, subscribers, events, gc_mode))
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
        "gc": gc_mode,
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
    parser.add_argument(
        "--gc", choices=GC_MODES, default="default", help="this process's garbage collector"
    )
    args = parser.parse_args(argv)
    unwind_on_termination()  # stop what it started also when killed with SIGTERM
    result = run(args.subscribers, args.events, args.reps, args.gc)
    suffix = "" if args.gc == "default" else f"_gc_{args.gc}"
    print(write_result(f"fanout_cpu_{args.subscribers}{suffix}", result))
    print(
        f"1-to-{args.subscribers}, gc {args.gc}: {result['events_per_s']} events/s; CPU per "
        f"event: broker {result['broker_cpu_us_per_event']} us, client process "
        f"{result['client_cpu_us_per_event']} us (limited by the {result['limited_by']})"
    )


if __name__ == "__main__":
    main()
