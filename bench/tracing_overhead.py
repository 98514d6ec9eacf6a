"""Cost of per-hop tracing: the capacity of one broker with tracing on and off,
alternately in the same run; medians over repetitions.

The broker must be the bottleneck, or the ratio would measure the load generator:
the publisher sends pre-encoded `Publish` frames over a raw protocol connection
(encoded before the clock starts, written in 256 KiB chunks), and the subscriber
counts `Deliver` frames by their length prefixes without decoding them. Both run
in this process, which needs a small fraction of the broker's CPU per event.

Reports delivered events per second (first byte sent to last frame received) and
the broker process's CPU time per event (from /proc/PID/stat). Each repetition runs
off and on back to back (in alternating order), and the headline ratio on/off is the
median of the repetitions' ratios, so that the machine's slow drifts cancel. With
tracing on it also reports the CPU time per event of the broker's trace writer
process (`monitor.hop_writer`, at the lowest CPU priority), from when the writer has
started up to when it has caught up. Target (issue 4): tracing costs at most 5 % of
the broker's throughput. Run: ``python -m bench.tracing_overhead [--quick]``.
"""

from __future__ import annotations

import argparse
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

from bench.common import median, write_result
from broker.process import BrokerProcesses
from broker.protocol import (
    PROTOCOL_VERSION,
    Connection,
    Hello,
    Publish,
    SubAck,
    Subscribe,
    Welcome,
    encode_frame,
)
from monitor.replay import process_cpu_s
from routing import parse_filter
from tests.network import free_base_port
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


async def count_frames(stream: trio.SocketStream, expected: int) -> float:
    """Read until `expected` frames arrived; the perf_counter time of the last one."""
    buffer = bytearray()
    frames = 0
    while frames < expected:
        data = await stream.receive_some(READ_SIZE)
        if not data:
            raise ConnectionError(f"broker closed the subscriber after {frames} frames")
        buffer += data
        start, end = 0, len(buffer)
        while end - start >= 4:
            stop = start + 4 + _LENGTH.unpack_from(buffer, start)[0]
            if stop > end:
                break
            frames += 1
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
                    done = await count_frames(sub_stream, events)

                nursery.start_soon(consume)
                start = time.perf_counter()
                for chunk in chunks:
                    await pub_stream.send_all(chunk)
        return done - start
    finally:
        await trio.aclose_forcefully(sub_stream)
        await trio.aclose_forcefully(pub_stream)


def writer_cpu_s(broker_pid: int) -> float:
    """CPU seconds of the broker's trace writer (its child process), once the writer has
    caught up (no more CPU used over 0.3 s, at most 60 s)."""
    children = Path(f"/proc/{broker_pid}/task/{broker_pid}/children").read_text().split()
    if len(children) != 1:
        raise RuntimeError(f"broker {broker_pid} has {len(children)} child processes, not 1")
    writer = int(children[0])
    used, deadline = -1.0, time.monotonic() + 60
    while time.monotonic() < deadline:
        now = process_cpu_s(writer)
        if now == used:
            return now
        used = now
        time.sleep(0.3)
    raise RuntimeError(f"trace writer {writer} still busy after 60 s")


def run_once(tracing: bool, chunks: list[bytes], events: int, workdir: Path) -> dict[str, float]:
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
        writer_before = writer_cpu_s(pid) if tracing else 0.0  # also: the writer is up
        cpu_before = process_cpu_s(pid)
        elapsed = trio.run(drive, topology.address(1), chunks, events)
        cpu = process_cpu_s(pid) - cpu_before
        sample = {"events_per_s": events / elapsed, "broker_cpu_us_per_event": cpu / events * 1e6}
        if tracing:
            writer_cpu = writer_cpu_s(pid) - writer_before
            sample["writer_cpu_us_per_event"] = writer_cpu / events * 1e6
    finally:
        procs.stop()
    return sample


def run(events: int, reps: int) -> dict[str, Any]:
    chunks = encoded_events(events)
    samples: dict[bool, list[dict[str, float]]] = {False: [], True: []}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(reps):
            for tracing in (False, True) if rep % 2 == 0 else (True, False):
                samples[tracing].append(run_once(tracing, chunks, events, Path(tmp)))
                print(f"rep {rep} tracing={tracing}: {samples[tracing][-1]}", file=sys.stderr)

    def med(tracing: bool, key: str) -> float:
        return median([s[key] for s in samples[tracing]])

    def paired(key: str) -> float:
        """Median over repetitions of the ratio on/off of `key`."""
        pairs = zip(samples[True], samples[False], strict=True)
        return median([on[key] / off[key] for on, off in pairs])

    off_rate, on_rate = med(False, "events_per_s"), med(True, "events_per_s")
    off_cpu, on_cpu = med(False, "broker_cpu_us_per_event"), med(True, "broker_cpu_us_per_event")
    rate_ratio, cpu_ratio = paired("events_per_s"), paired("broker_cpu_us_per_event")
    return {
        "events_per_run": events,
        "repetitions": reps,
        "off": {"events_per_s": round(off_rate, 1), "broker_cpu_us_per_event": round(off_cpu, 2)},
        "on": {
            "events_per_s": round(on_rate, 1),
            "broker_cpu_us_per_event": round(on_cpu, 2),
            "writer_cpu_us_per_event": round(med(True, "writer_cpu_us_per_event"), 2),
        },
        "throughput_ratio_on_off": round(rate_ratio, 3),
        "throughput_cost_percent": round((1 - rate_ratio) * 100, 1),
        "cpu_ratio_on_off": round(cpu_ratio, 3),
        "cpu_cost_percent": round((cpu_ratio - 1) * 100, 1),
        "target_met": rate_ratio >= 0.95,
        "samples": {"off": samples[False], "on": samples[True]},
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer events and repetitions")
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--reps", type=int, default=11)
    args = parser.parse_args(argv)
    events, reps = (40_000, 3) if args.quick else (args.events, args.reps)
    result = run(events, reps)
    print(write_result("tracing_overhead", result))
    print(
        f"tracing on/off (median of paired ratios): throughput x{result['throughput_ratio_on_off']}"
        f", broker CPU per event x{result['cpu_ratio_on_off']}; the trace writer used "
        f"{result['on']['writer_cpu_us_per_event']} us of CPU per event"
    )


if __name__ == "__main__":
    main()
