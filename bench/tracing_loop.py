"""The broker's own cost of tracing, without sockets: CPU time per event of its read
handling (`Broker._handle_read`: routing each event of a read, enqueueing the
deliveries, and with tracing on, recording and shipping the rows to the writer
process), on and off, in one process.

`bench.tracing_overhead` measures what a user sees (the throughput of a broker
process), but on a 2-core machine that number also moves with whatever else runs,
the trace writer included. This one isolates the broker's thread: one broker, one
publisher link and one subscriber link (in-memory queues, drained after each read),
pre-decoded reads of 64 KiB of 150-byte events as the broker gets them at
saturation. It reports, per mode, the minimum over repetitions of the thread's CPU
time per event (noise on a shared machine only ever adds) and their difference, and
the median over repetitions of the difference on - off of back-to-back runs.
Run: ``python -m bench.tracing_loop [--quick]``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

from bench.common import median, write_result
from bench.tracing_overhead import encoded_events
from broker.outgoing import OutQueue
from broker.protocol import PROTOCOL_VERSION, Connection, Hello, Welcome
from broker.server import READ_SIZE, Broker, BrokerConfig, Link, LinkCounters
from routing import parse_filter
from topologies.generators import chain


class LoopBroker:
    """A broker with a publisher and a subscriber link and no sockets."""

    def __init__(self, trace_dir: Path | None) -> None:
        topology = chain(1, name="loop", base_port=20000)  # never listens
        self.broker = Broker(topology, 1, BrokerConfig(trace_dir=trace_dir, run_id="loop"))
        self.subscriber = self._link("client:sub#1", "sub")
        self.publisher = self._link("client:pub#2", "pub")
        self.broker.router.subscribe(self.subscriber.link_id, 1, parse_filter("n >= 0"))

    def _link(self, link_id: str, name: str) -> Link:
        broker = self.broker
        tracing = broker.tracer is not None
        counters = LinkCounters()
        queue = OutQueue(1_000_000, broker.config.batch_frames, broker.outgoing, counters, None)
        conn = Connection("acceptor", keep_frames=tracing, keep_payloads=True, publish_arrays=True)
        conn.receive_data(Connection("initiator").send(Hello(PROTOCOL_VERSION, "client", name)))
        conn.send(Welcome(PROTOCOL_VERSION, broker.name))
        link = Link(link_id, "client", name, None, conn, queue, counters)  # type: ignore[arg-type]
        broker.links[link_id] = link
        broker.router.add_client(link_id)
        if broker.tracer is not None:
            broker.tracer.name_link(link_id, name, "client")
            link.trace_outcome = broker.tracer.outcome_of((link_id,))
        return link

    async def cpu_per_event_us(self, reads: list[bytes]) -> float:
        """Handle `reads` as the broker's reader would; this thread's CPU us per event."""
        broker, link = self.broker, self.publisher
        conn = link.conn
        events = 0
        started = time.thread_time_ns()
        for data in reads:
            tracing = broker.tracer is not None
            t_read, cpu_read = (time.time_ns(), time.thread_time_ns()) if tracing else (0, 0)
            messages = conn.receive_data(data)
            events += len(messages)
            await broker._handle_read(
                link, messages, conn.received_payloads, conn.received_frames, t_read, cpu_read
            )
            drain(self.subscriber)
        return (time.thread_time_ns() - started) / events / 1e3

    def close(self) -> None:
        if self.broker.tracer is not None:
            self.broker.tracer.close()


def drain(link: Link) -> None:
    """Empty the link's outgoing queue, as its writer task would."""
    queue = link.queue
    queue.outgoing.frames -= queue.queued
    queue.queued = 0
    queue.frames = []


def reads_of(events: int) -> list[bytes]:
    """The events' frames cut into reads of READ_SIZE bytes (frames split across reads,
    as TCP delivers them)."""
    data = b"".join(encoded_events(events))
    return [data[i : i + READ_SIZE] for i in range(0, len(data), READ_SIZE)]


def run(events: int, reps: int) -> dict[str, Any]:
    reads = reads_of(events)
    samples: dict[str, list[float]] = {"off": [], "on": []}

    async def measure(tmp: Path) -> None:
        brokers = {"off": LoopBroker(None), "on": LoopBroker(tmp / "traces")}
        try:
            for rep in range(reps):
                for mode in ("off", "on") if rep % 2 == 0 else ("on", "off"):
                    samples[mode].append(await brokers[mode].cpu_per_event_us(reads))
        finally:
            for broker in brokers.values():
                broker.close()

    with tempfile.TemporaryDirectory() as tmp:
        trio.run(measure, Path(tmp))
    off, on = min(samples["off"]), min(samples["on"])
    paired = median([a - b for a, b in zip(samples["on"], samples["off"], strict=True)])
    return {
        "events_per_repetition": events,
        "repetitions": reps,
        "off_cpu_us_per_event": round(off, 3),
        "on_cpu_us_per_event": round(on, 3),
        "tracing_us_per_event": round(on - off, 3),
        "tracing_cost_percent": round((on / off - 1) * 100, 1),
        "paired_median_us_per_event": round(paired, 3),
        "paired_median_cost_percent": round(paired / median(samples["off"]) * 100, 1),
        "samples": samples,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer events and repetitions")
    args = parser.parse_args(argv)
    events, reps = (20_000, 6) if args.quick else (50_000, 20)
    result = run(events, reps)
    print(write_result("tracing_loop", result))
    print(
        f"broker read handling, min over {reps} repetitions: off "
        f"{result['off_cpu_us_per_event']} us, on {result['on_cpu_us_per_event']} us per "
        f"event: tracing adds {result['tracing_us_per_event']} us "
        f"({result['tracing_cost_percent']} %); median of paired differences "
        f"{result['paired_median_us_per_event']} us ({result['paired_median_cost_percent']} %)"
    )


if __name__ == "__main__":
    main()
