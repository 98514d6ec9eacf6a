"""Cost of per-hop tracing: one broker, one publisher, one subscriber, tracing on and
off alternately in the same run; medians over repetitions.

Reports delivered events per second and the broker process's CPU time per event
(from /proc/PID/stat), and their ratios on/off. Target (issue 4): tracing costs at
most 5 %. Run: ``python -m bench.tracing_overhead``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

import client
from bench.common import median, write_result
from broker.process import BrokerProcesses
from monitor.replay import process_cpu_s
from tests.network import free_base_port
from topologies.generators import chain, to_toml

PAYLOAD = b"x" * 100  # with the other attributes, frames of about 150 bytes


async def drive(address: tuple[str, int], events: int) -> float:
    """Publish `events` as fast as the broker takes them; seconds until all arrived."""
    async with (
        client.open_client(*address, name="bench-sub") as sub_client,
        client.open_client(*address, name="bench-pub") as pub,
    ):
        sub = await sub_client.subscribe("n >= 0")
        received = 0

        async def consume() -> None:
            nonlocal received
            while received < events:
                received += len(await sub.next_batch())

        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(consume)
            for i in range(events):
                await pub.publish({"type": "bench", "n": i, "payload": PAYLOAD})
        return time.perf_counter() - start


def run_once(tracing: bool, events: int, workdir: Path) -> dict[str, float]:
    topology = chain(1, name="bench1", base_port=free_base_port(1))
    path = workdir / "bench1.toml"
    path.write_text(to_toml(topology))
    extra = ["--log-level", "warning"]
    if tracing:
        extra += ["--trace-dir", str(workdir / f"traces-{time.monotonic_ns()}"), "--run-id", "b"]
    procs = BrokerProcesses(path, topology, extra)
    procs.start()
    try:
        procs.wait_listening()
        pid = procs.procs[1].pid
        cpu_before = process_cpu_s(pid)
        elapsed = trio.run(drive, topology.address(1), events)
        cpu = process_cpu_s(pid) - cpu_before
    finally:
        procs.stop()
    return {"events_per_s": events / elapsed, "broker_cpu_us_per_event": cpu / events * 1e6}


def run(events: int, reps: int) -> dict[str, Any]:
    samples: dict[bool, list[dict[str, float]]] = {False: [], True: []}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(reps):
            for tracing in (False, True) if rep % 2 == 0 else (True, False):
                samples[tracing].append(run_once(tracing, events, Path(tmp)))
                print(f"rep {rep} tracing={tracing}: {samples[tracing][-1]}", file=sys.stderr)

    def med(tracing: bool, key: str) -> float:
        return median([s[key] for s in samples[tracing]])

    off_rate, on_rate = med(False, "events_per_s"), med(True, "events_per_s")
    off_cpu, on_cpu = med(False, "broker_cpu_us_per_event"), med(True, "broker_cpu_us_per_event")
    return {
        "events_per_run": events,
        "repetitions": reps,
        "off": {"events_per_s": round(off_rate, 1), "broker_cpu_us_per_event": round(off_cpu, 2)},
        "on": {"events_per_s": round(on_rate, 1), "broker_cpu_us_per_event": round(on_cpu, 2)},
        "throughput_ratio_on_off": round(on_rate / off_rate, 3),
        "throughput_cost_percent": round((1 - on_rate / off_rate) * 100, 1),
        "cpu_ratio_on_off": round(on_cpu / off_cpu, 3),
        "cpu_cost_percent": round((on_cpu / off_cpu - 1) * 100, 1),
        "samples": {"off": samples[False], "on": samples[True]},
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer events and repetitions")
    parser.add_argument("--events", type=int, default=30_000)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args(argv)
    events, reps = (10_000, 3) if args.quick else (args.events, args.reps)
    result = run(events, reps)
    print(write_result("tracing_overhead", result))
    print(
        f"tracing on/off: throughput x{result['throughput_ratio_on_off']}, "
        f"broker CPU per event x{result['cpu_ratio_on_off']}"
    )


if __name__ == "__main__":
    main()
