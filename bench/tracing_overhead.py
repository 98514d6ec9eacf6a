"""Cost of per-hop tracing: the capacity of one broker with tracing on and off, in
the same run, as the median of many paired measurements.

The broker must be the bottleneck, or the ratio would measure the load generator:
the publisher sends pre-encoded `Publish` frames over a raw protocol connection
(encoded before the clock starts, written in 256 KiB chunks), and the subscriber
counts Delivers by the frames' length prefixes without decoding them (and the count
in the head of a frame of several, `Deliveries`). Both run
in this process, which needs a small fraction of the broker's CPU per event.

This machine's speed moves by 10-30 % within seconds (other tenants), more than the
cost being measured. So the two brokers, one traced and one not, run side by side
(the idle one sleeps) and take turns: a segment of events to one, then to the other,
in alternating order, many times; a fresh pair of brokers every round. Each pair of
adjacent segments gives a ratio on/off, and the headline is their median, with a
bootstrap 95 % interval. Per segment it reports delivered events per second (first
byte sent to last frame received) and the broker process's CPU time per event (its
CPU clock); per round, the CPU time per event of the traced broker's writer
process (`broker.trace.hop_writer`, at the lowest CPU priority). Target:
tracing costs at most 5 % of the broker's throughput.
Run: ``python -m bench.tracing_overhead [--quick] [--out FILE]``.
"""

from __future__ import annotations

import argparse
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import trio

from bench.common import median, write_result
from broker.local_network import free_base_port
from broker.process import BrokerProcesses, process_cpu_s, unwind_on_termination
from broker.protocol import (
    DELIVERIES_HEAD,
    PROTOCOL_VERSION,
    Connection,
    Hello,
    Publish,
    SubAck,
    Subscribe,
    Welcome,
    encode_frame,
)
from routing import parse_filter
from topologies.generators import chain, to_toml

PAYLOAD = b"x" * 100  # with the other attributes, frames of about 150 bytes
CHUNK = 256 * 1024
READ_SIZE = 65536
TIME_LIMIT_S = 120.0
_LENGTH = struct.Struct(">I")


async def _open(address: tuple[str, int], name: str) -> tuple[trio.SocketStream, Connection]:
    """A raw client connection past the handshake."""
    stream = await trio.open_tcp_stream(*address)
    conn = Connection("initiator")
    await stream.send_all(conn.send(Hello(PROTOCOL_VERSION, "client", name)))
    await _expect(stream, conn, Welcome)
    return stream, conn


async def _expect(stream: trio.SocketStream, conn: Connection, kind: type) -> None:
    while True:
        data = await stream.receive_some(READ_SIZE)
        if not data:
            raise ConnectionError(f"broker closed the connection before {kind.__name__}")
        messages = conn.receive_data(data)
        if messages:
            if not isinstance(messages[0], kind) or len(messages) > 1:
                raise ConnectionError(f"expected {kind.__name__}, got {messages!r}")
            return


def encoded_events(events: int) -> list[bytes]:
    """`events` Publish frames, joined into chunks of about `CHUNK` bytes."""
    chunks, parts, size = [], [], 0
    for n in range(events):
        frame = encode_frame(
            Publish(
                f"bench-pub:{n}",
                "bench-pub",
                {"type": "bench", "n": n, "payload": PAYLOAD},
                [],
                time.time_ns(),
            )
        )
        parts.append(frame)
        size += len(frame)
        if size >= CHUNK:
            chunks.append(b"".join(parts))
            parts, size = [], 0
    if parts:
        chunks.append(b"".join(parts))
    return chunks


def delivers_in(buffer: bytes | bytearray, start: int) -> int:
    """How many Delivers the whole frame at ``start`` of ``buffer`` carries: the count
    in a `Deliveries` frame's array header (`broker.protocol.join_frames`), else 1."""
    if buffer[start + 4 : start + 6] != DELIVERIES_HEAD:
        return 1
    header = buffer[start + 6]
    if header & 0xF0 == 0x90:  # fixarray
        return header & 0x0F
    size = 2 if header == 0xDC else 4  # array 16, array 32
    return int.from_bytes(buffer[start + 7 : start + 7 + size], "big")


async def count_delivers(stream: trio.SocketStream, expected: int) -> float:
    """Read until `expected` Delivers arrived; the perf_counter time of the last one."""
    buffer = bytearray()
    delivers = 0
    while delivers < expected:
        data = await stream.receive_some(READ_SIZE)
        if not data:
            raise ConnectionError(f"broker closed the subscriber after {delivers} events")
        buffer += data
        start, end = 0, len(buffer)
        while end - start >= 4:
            stop = start + 4 + _LENGTH.unpack_from(buffer, start)[0]
            if stop > end:
                break
            delivers += delivers_in(buffer, start)
            start = stop
        del buffer[:start]
    return time.perf_counter()


async def drive(address: tuple[str, int], chunks: list[bytes], events: int) -> float:
    """Send the pre-encoded events; seconds until all were delivered."""
    sub_stream, sub_conn = await _open(address, "bench-sub")
    pub_stream, _ = await _open(address, "bench-pub")
    try:
        await sub_stream.send_all(sub_conn.send(Subscribe(1, parse_filter("n >= 0").to_wire())))
        await _expect(sub_stream, sub_conn, SubAck)
        done = 0.0
        with trio.fail_after(TIME_LIMIT_S):
            async with trio.open_nursery() as nursery:

                async def consume() -> None:
                    nonlocal done
                    done = await count_delivers(sub_stream, events)

                nursery.start_soon(consume)
                start = time.perf_counter()
                for chunk in chunks:
                    await pub_stream.send_all(chunk)
        return done - start
    finally:
        await trio.aclose_forcefully(sub_stream)
        await trio.aclose_forcefully(pub_stream)


CAUGHT_UP_CPU_S = 0.001
"""The trace writer's CPU over 0.3 s below which it has written all it was given."""


def writer_cpu_s(broker_pid: int) -> float:
    """CPU seconds of the broker's trace writer (its child process), once the writer has
    caught up (under 1 ms of CPU used over 0.3 s, at most 60 s)."""
    children = Path(f"/proc/{broker_pid}/task/{broker_pid}/children").read_text().split()
    if len(children) != 1:
        raise RuntimeError(f"broker {broker_pid} has {len(children)} child processes, not 1")
    writer = int(children[0])
    used, deadline = -1.0, time.monotonic() + 60
    while time.monotonic() < deadline:
        now = process_cpu_s(writer)
        if now - used < CAUGHT_UP_CPU_S:
            return now
        used = now
        time.sleep(0.3)
    raise RuntimeError(f"trace writer {writer} still busy after 60 s")


class Brokers:
    """An untraced and a traced broker, each a process with its own port."""

    def __init__(self, workdir: Path, tag: str) -> None:
        self.procs: dict[bool, BrokerProcesses] = {}
        self.addresses: dict[bool, tuple[str, int]] = {}
        for tracing in (False, True):
            name = f"bench-{tag}-{'on' if tracing else 'off'}"
            topology = chain(1, name=name, base_port=free_base_port(1))
            path = workdir / f"{name}.toml"
            path.write_text(to_toml(topology))
            extra = ["--log-level", "warning"]
            if tracing:
                extra += ["--trace-dir", str(workdir / f"traces-{name}"), "--run-id", name]
            self.procs[tracing] = BrokerProcesses(path, topology, extra)
            self.addresses[tracing] = topology.address(1)

    def __enter__(self) -> Brokers:
        try:
            for procs in self.procs.values():
                procs.start()
                procs.wait_listening()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *_: object) -> None:
        for procs in self.procs.values():
            procs.stop()

    def pid(self, tracing: bool) -> int:
        return self.procs[tracing].procs[1].pid

    def segment(self, tracing: bool, chunks: list[bytes], events: int) -> dict[str, float]:
        """Send the events through one of the brokers: its events/s and CPU per event."""
        pid = self.pid(tracing)
        cpu_before = process_cpu_s(pid)
        elapsed = trio.run(drive, self.addresses[tracing], chunks, events)
        cpu = process_cpu_s(pid) - cpu_before
        return {"events_per_s": events / elapsed, "broker_cpu_us_per_event": cpu / events * 1e6}


def run(events: int, rounds: int, pairs: int) -> dict[str, Any]:
    chunks = encoded_events(events)
    samples: dict[bool, list[dict[str, float]]] = {False: [], True: []}
    writer_us: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        for round_number in range(rounds):
            with Brokers(Path(tmp), str(round_number)) as brokers:
                for tracing in (False, True):  # warm-up, not counted
                    brokers.segment(tracing, chunks, events)
                writer_before = writer_cpu_s(brokers.pid(True))
                for pair in range(pairs):
                    first = (round_number * pairs + pair) % 2 == 1
                    for tracing in (first, not first):
                        samples[tracing].append(brokers.segment(tracing, chunks, events))
                    print(
                        f"round {round_number} pair {pair}: off {samples[False][-1]}, "
                        f"on {samples[True][-1]}",
                        file=sys.stderr,
                    )
                writer_cpu = writer_cpu_s(brokers.pid(True)) - writer_before
                writer_us.append(writer_cpu / (pairs * events) * 1e6)

    def med(tracing: bool, key: str) -> float:
        return median([s[key] for s in samples[tracing]])

    def ratios(key: str) -> list[float]:
        """Per pair: the ratio on/off of `key`."""
        pairs_ = zip(samples[True], samples[False], strict=True)
        return [on[key] / off[key] for on, off in pairs_]

    rate_ratios = ratios("events_per_s")
    rate_ratio, cpu_ratio = median(rate_ratios), median(ratios("broker_cpu_us_per_event"))
    low, high = bootstrap_median_interval(rate_ratios)
    return {
        "events_per_segment": events,
        "rounds": rounds,
        "pairs": len(rate_ratios),
        "off": {
            "events_per_s": round(med(False, "events_per_s"), 1),
            "broker_cpu_us_per_event": round(med(False, "broker_cpu_us_per_event"), 2),
        },
        "on": {
            "events_per_s": round(med(True, "events_per_s"), 1),
            "broker_cpu_us_per_event": round(med(True, "broker_cpu_us_per_event"), 2),
            "writer_cpu_us_per_event": round(median(writer_us), 2),
        },
        "throughput_ratio_on_off": round(rate_ratio, 3),
        "throughput_ratio_ci95": [round(low, 3), round(high, 3)],
        "throughput_cost_percent": round((1 - rate_ratio) * 100, 1),
        "cpu_ratio_on_off": round(cpu_ratio, 3),
        "cpu_cost_percent": round((cpu_ratio - 1) * 100, 1),
        "target_met": rate_ratio >= 0.95,
        "samples": {"off": samples[False], "on": samples[True]},
    }


def bootstrap_median_interval(values: list[float], resamples: int = 2000) -> tuple[float, float]:
    """A 95 % interval for the median of `values` (percentile bootstrap, fixed seed)."""
    rng = np.random.default_rng(0)
    data = np.asarray(values)
    medians = np.median(rng.choice(data, (resamples, len(data))), axis=1)
    low, high = np.percentile(medians, [2.5, 97.5])
    return float(low), float(high)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer events and pairs")
    parser.add_argument("--events", type=int, default=50_000, help="events per segment")
    parser.add_argument("--rounds", type=int, default=8, help="fresh pairs of brokers")
    parser.add_argument("--pairs", type=int, default=12, help="pairs of segments per round")
    parser.add_argument("--out", type=Path, help="result file (default bench/results/...)")
    args = parser.parse_args(argv)
    unwind_on_termination()  # stop what it started also when killed with SIGTERM
    shape = (20_000, 2, 4) if args.quick else (args.events, args.rounds, args.pairs)
    result = run(*shape)
    print(write_result("tracing_overhead", result, args.out))
    low, high = result["throughput_ratio_ci95"]
    print(
        f"tracing on/off (median of {result['pairs']} paired ratios): throughput "
        f"x{result['throughput_ratio_on_off']} (95 % interval x{low}-x{high}), broker CPU "
        f"per event x{result['cpu_ratio_on_off']}; the trace writer used "
        f"{result['on']['writer_cpu_us_per_event']} us of CPU per event"
    )


if __name__ == "__main__":
    main()
