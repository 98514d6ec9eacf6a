"""Throughput, latency and memory of our broker, against the trivial trio relay.

Benchmarks (``python -m bench --only NAME``; ``python -m bench.throughput`` runs all):

* ``link``: the limit. The relay of ``bench.relay`` (decode + re-encode every msgpack
  frame, no matching) as its own process, publisher -> relay -> 1 or 4 subscribers,
  150-byte frames, driven by a raw trio client speaking the same framing.
* ``hop``: one broker process, 1 publisher and 1 or 4 subscribers, measured with our
  trio client (``client.open_client``), with 1000 subscriptions installed: the
  subscribers' ``type = "bench" and family = 0`` (which every event matches) and
  1000 - fanout filler subscriptions on an idle connection (``family = K`` and
  ``price > P``, which no event matches). Reported with its ratio to ``link``; the
  relay, which has no matching, gets no filler.
* ``chain``: 5 brokers in a line (broker 1 the root), the subscriber on broker 1, one
  publisher on broker 1 and one on broker 5, alternating events at 400 events/s; the
  added latency per broker hop is (p50 via 5 brokers - p50 via 1 broker) / 4. The
  baseline is a chain of 5 relays measured the same way, alternating with the brokers.
  Both chains are measured twice in each repetition, taking turns: on the machine as it
  is, and with every CPU kept from idling by an idle-priority busy loop
  (``bench.awake``; under ``cpus_kept_awake`` in the results), which takes what idle
  CPUs cost (on a VM: halted vCPUs, woken through the hypervisor) out of the hops. The
  target is judged on the first.
  The 999 filler subscriptions sit on broker 1: below the root, every subscription
  is checked for covering against all those forwarded before (quadratic: 999 of them
  on broker 5 took over 30 s, and dropping them stalled the brokers for over 10 s).
* ``memory``: the broker's RSS (VmRSS of /proc/PID/status) idle and holding 100k
  subscriptions (of three shapes, installed over one raw protocol connection,
  pipelined: the client library would only add its own per-subscription queues and
  time); then, on a fresh broker, under a subscriber (raw protocol) that reads only
  16 KiB every 10 ms while our client publishes 1 KiB events as fast as it can: peak
  RSS growth (backpressure should keep it near the 4096-frame queue).

How: each measurement of a system runs in this process, as trio tasks (publisher and
subscribers), against the system's own broker process(es). Saturation throughput is
the delivered events/s of a fixed count of events published as fast as the system
takes them (first publish to last delivery). Latency comes from rate-limited runs
(scheduled on trio's clock): every event carries its publication time
(``time.time_ns()``), compared with ``time.time_ns()`` when the subscriber decoded
it; p50/p99 in microseconds, at 500 events/s and at 50 % of the repetition's
saturation rate. Systems alternate within each repetition (the order reversed every
other one), and the medians over repetitions are reported with every sample.
"""

from __future__ import annotations

import abc
import argparse
import itertools
import math
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import AsyncExitStack, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

import msgpack
import trio

import client
from bench.awake import cpus_kept_awake
from bench.common import REPO, median, write_result
from bench.relay import READ_SIZE, FrameDecoder, handshake
from broker.limits import Limits
from broker.local_network import Network, free_base_port
from broker.process import StartupError, port_accepts, unwind_on_termination
from broker.protocol import (
    PROTOCOL_VERSION,
    Connection,
    Deliver,
    Error,
    Hello,
    Message,
    Ping,
    Pong,
    Stats,
    StatsRequest,
    SubAck,
    Subscribe,
    Welcome,
)
from routing import parse_filter
from topologies.generators import chain

HOST = "127.0.0.1"
PAYLOAD = b"x" * 55  # with the other attributes, a Publish frame of 150 bytes
MATCHING_FILTER = 'type = "bench" and family = 0'
TOTAL_SUBSCRIPTIONS = 1000
FANOUTS = (1, 4)
PUBLISH_BATCH = 256
SATURATION_TIME_LIMIT_S = 30.0
CHAIN_LENGTH = 5
CHAIN_RATE = 400.0  # events/s, both publishers together: "low load"
LOW_RATE = 500.0
SUBSCRIBE_CONCURRENCY = 64
START_ATTEMPTS = 3

M = TypeVar("M", bound=Message)
T = TypeVar("T")
Sample = tuple[int, int]
"""(sequence number, latency in ns) of one received event."""


@dataclass(frozen=True)
class Settings:
    """Sizes of a run: ``quick()`` fits the 5-minute budget of ``python -m bench --quick``."""

    reps: int
    events: int  # events per saturation run
    latency_s: float  # seconds of each rate-limited latency run
    chain_events: int  # events per chain latency run (both paths together)
    memory_subscriptions: int
    slow_subscriber_s: float

    @classmethod
    def quick(cls) -> Settings:
        return cls(3, 20_000, 0.6, 600, 100_000, 3.0)

    @classmethod
    def full(cls) -> Settings:
        return cls(5, 100_000, 4.0, 2_000, 100_000, 10.0)


def event_attributes(seq: int, payload: bytes = PAYLOAD) -> dict[str, Any]:
    return {"type": "bench", "family": 0, "price": 50.0, "n": seq, "payload": payload}


def publish_wire(name: str, seq: int) -> list[Any]:
    """The msgpack array of a Publish message (``broker.messages``) for event ``seq``,
    stamped now: what the raw clients send, so every system carries the same bytes."""
    return [20, f"{name}:{seq}", name, event_attributes(seq), [], time.time_ns()]


def filler_filters(count: int) -> list[str]:
    """``count`` filters that no benchmark event (family 0, price 50) matches."""
    return [f"price > {1000 + k}" if k % 4 == 3 else f"family = {k + 1}" for k in range(count)]


# --- processes -------------------------------------------------------------------------


def start_process(
    cmd: list[str], address: tuple[str, int], log: Path, timeout: float = 20.0
) -> subprocess.Popen[bytes]:
    """Start ``cmd`` (output to ``log``) and wait until it accepts TCP at ``address``."""
    with log.open("ab") as out:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=out, cwd=REPO)
    deadline = time.monotonic() + timeout
    while not port_accepts(*address):
        if proc.poll() is not None:
            raise RuntimeError(f"{cmd[0]} exited with code {proc.returncode}; see {log}")
        if time.monotonic() > deadline:
            stop_process(proc)
            raise RuntimeError(f"{' '.join(cmd)} did not listen on {address} in {timeout} s")
        time.sleep(0.05)
    return proc


def stop_process(proc: subprocess.Popen[bytes], timeout: float = 5.0) -> None:
    """SIGTERM the process (by its PID), SIGKILL it if still there after ``timeout``."""
    if proc.poll() is None:
        proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def retry_ports(start: Callable[[], T], attempts: int = START_ATTEMPTS) -> T:
    """``start()``, which picks free ports and starts processes on them, tried again if
    a process fails to start: other work on the machine takes ports too, so a port
    found free may be taken before the process binds it."""
    for _ in range(attempts - 1):
        try:
            return start()
        except (StartupError, RuntimeError) as exc:
            print(f"bench: start failed ({exc}); again on other ports", file=sys.stderr)
    return start()


def start_network_on(network: Network) -> Network:
    """Start the brokers of ``network`` (linked when this returns); stop them on failure."""
    try:
        network.start()
    except BaseException:
        network.stop()
        raise
    return network


def rss_mb(pid: int) -> float:
    """Resident set size of a process in MB (VmRSS of /proc/PID/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def start_relay(port: int, workdir: Path, upstream: int | None = None) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "bench.relay", "--port", str(port)]
    if upstream is not None:
        cmd += ["--upstream", f"{HOST}:{upstream}"]
    return start_process(cmd, (HOST, port), workdir / f"relay-{port}.log")


# --- clients ---------------------------------------------------------------------------


class Publisher(Protocol):
    async def publish(self, seqs: range) -> None:
        """Publish the events ``seqs``, each stamped when it is encoded; in one write
        where the client allows it."""


class Subscriber(Protocol):
    async def receive(self) -> list[Sample]:
        """Wait for events; return the (seq, latency) of each one that arrived."""


class HopPublisher:
    """Our trio client publishing (it batches the frames it is given in a row)."""

    def __init__(self, c: client.AsyncClient) -> None:
        self.client = c

    async def publish(self, seqs: range) -> None:
        for seq in seqs:
            await self.client.publish(event_attributes(seq))


class HopSubscriber:
    def __init__(self, sub: client.AsyncSubscription) -> None:
        self.sub = sub

    async def receive(self) -> list[Sample]:
        return [
            (d.attributes["n"], d.t_deliver_ns - d.t_publish_ns)
            for d in await self.sub.next_batch()
        ]


class RelayPublisher:
    """A raw framing client: Publish-shaped msgpack frames, one ``send_all`` per call."""

    def __init__(self, stream: trio.SocketStream, name: str) -> None:
        self.stream = stream
        self.name = name
        self._pack = msgpack.Packer(use_bin_type=True).pack

    async def publish(self, seqs: range) -> None:
        parts: list[bytes] = []
        for seq in seqs:
            payload = self._pack(publish_wire(self.name, seq))
            parts += (len(payload).to_bytes(4, "big"), payload)
        await self.stream.send_all(b"".join(parts))


class RelaySubscriber:
    def __init__(self, stream: trio.SocketStream, decoder: FrameDecoder) -> None:
        self.stream = stream
        self.decoder = decoder

    async def receive(self) -> list[Sample]:
        while True:
            data = await self.stream.receive_some(READ_SIZE)
            if not data:
                raise ConnectionError("the relay closed the connection")
            t_ns = time.time_ns()
            frames = self.decoder.feed(data)
            if frames:
                return [(m[3]["n"], t_ns - m[5]) for m in frames]


async def open_hop(
    stack: AsyncExitStack, address: tuple[str, int], name: str
) -> client.AsyncClient:
    return await stack.enter_async_context(client.open_client(*address, name=name))


async def open_relay(
    stack: AsyncExitStack, address: tuple[str, int], role: str
) -> tuple[trio.SocketStream, FrameDecoder]:
    stream = await trio.open_tcp_stream(*address)
    stack.push_async_callback(trio.aclose_forcefully, stream)
    return stream, await handshake(stream, role)


async def subscribe_all(
    c: client.AsyncClient, filters: list[str], concurrency: int = SUBSCRIBE_CONCURRENCY
) -> None:
    """Subscribe to every filter, ``concurrency`` requests in flight at a time."""
    todo = iter(filters)

    async def worker() -> None:
        for f in todo:
            await c.subscribe(f)

    async with trio.open_nursery() as nursery:
        for _ in range(concurrency):
            nursery.start_soon(worker)


# --- systems under test ----------------------------------------------------------------


class System(abc.ABC):
    """A system under test: its processes, and connections to its node ``node`` (1 for
    a single broker; 1 .. n along a chain, 1 being where the subscribers are)."""

    name: str
    events_scale = 1.0  # fraction of Settings.events per saturation run (slow systems)

    @abc.abstractmethod
    def start(self, workdir: Path) -> None: ...

    @abc.abstractmethod
    def stop(self) -> None: ...

    @abc.abstractmethod
    async def publisher(self, stack: AsyncExitStack, node: int = 1) -> Publisher: ...

    @abc.abstractmethod
    async def subscriber(self, stack: AsyncExitStack, node: int = 1) -> Subscriber:
        """A subscriber whose subscription is in force when this returns."""

    @abc.abstractmethod
    async def install_filler(self, stack: AsyncExitStack, count: int, node: int = 1) -> None:
        """Hold ``count`` subscriptions that no event matches, on an idle connection."""


class RelaySystem(System):
    """``length`` relays in a chain (1: a single relay); node 1 is the last of the chain,
    which subscribes to node 2, and so on up to node ``length``."""

    def __init__(self, length: int = 1) -> None:
        self.name = "relay" if length == 1 else f"relay-chain{length}"
        self.length = length
        self.ports: dict[int, int] = {}
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, workdir: Path) -> None:
        def start_chain() -> None:
            base = free_base_port(self.length)
            self.ports = {node: base + node for node in range(1, self.length + 1)}
            try:
                for node in range(self.length, 0, -1):
                    upstream = self.ports.get(node + 1)
                    self.procs.append(start_relay(self.ports[node], workdir, upstream))
            except BaseException:
                self.stop()
                raise

        retry_ports(start_chain)

    def stop(self) -> None:
        for proc in self.procs:
            stop_process(proc)
        self.procs = []

    def pid(self, node: int = 1) -> int:
        """The PID of relay ``node`` (started from the far end of the chain: node 1 last)."""
        return self.procs[self.length - node].pid

    async def publisher(self, stack: AsyncExitStack, node: int = 1) -> Publisher:
        stream, _ = await open_relay(stack, (HOST, self.ports[node]), "pub")
        return RelayPublisher(stream, f"relay-pub{node}")

    async def subscriber(self, stack: AsyncExitStack, node: int = 1) -> Subscriber:
        return RelaySubscriber(*await open_relay(stack, (HOST, self.ports[node]), "sub"))

    async def install_filler(self, stack: AsyncExitStack, count: int, node: int = 1) -> None:
        """Nothing: the relay has no subscriptions (it is the no-matching limit)."""


class HopSystem(System):
    """Our brokers: ``length`` of them in a chain (1: a single broker), one process each,
    default settings, tracing off."""

    def __init__(self, length: int = 1) -> None:
        self.name = "hop" if length == 1 else f"hop-chain{length}"
        self.length = length
        self.network: Network | None = None
        self._names = itertools.count(1)

    def start(self, workdir: Path) -> None:
        def start_network() -> Network:
            topology = chain(self.length, name=self.name, base_port=free_base_port(self.length))
            return start_network_on(Network(topology, workdir))

        self.network = retry_ports(start_network)

    def stop(self) -> None:
        if self.network is not None:
            self.network.stop()
            self.network = None

    def pid(self, node: int = 1) -> int:
        assert self.network is not None
        return self.network.procs.procs[node].pid

    def address(self, node: int) -> tuple[str, int]:
        assert self.network is not None
        return self.network.address(node)

    async def publisher(self, stack: AsyncExitStack, node: int = 1) -> Publisher:
        name = f"bench-pub{next(self._names)}"
        return HopPublisher(await open_hop(stack, self.address(node), name))

    async def subscriber(self, stack: AsyncExitStack, node: int = 1) -> Subscriber:
        c = await open_hop(stack, self.address(node), f"bench-sub{next(self._names)}")
        return HopSubscriber(await c.subscribe(MATCHING_FILTER))

    async def install_filler(self, stack: AsyncExitStack, count: int, node: int = 1) -> None:
        c = await open_hop(stack, self.address(node), f"bench-filler{next(self._names)}")
        await subscribe_all(c, filler_filters(count))


# --- measurements ----------------------------------------------------------------------


def percentile(values: list[int], q: float) -> int:
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]


def latency_summary(latencies_ns: list[int]) -> dict[str, float | None]:
    if not latencies_ns:
        return {"p50_us": None, "p99_us": None, "max_us": None}
    return {
        "p50_us": round(percentile(latencies_ns, 50) / 1000, 1),
        "p99_us": round(percentile(latencies_ns, 99) / 1000, 1),
        "max_us": round(max(latencies_ns) / 1000, 1),
    }


async def drain(subs: list[Subscriber], quiet_s: float = 0.2, limit_s: float = 10.0) -> None:
    """Swallow what is still arriving, until ``quiet_s`` without any (at most ``limit_s``)."""
    with trio.move_on_after(limit_s):
        while True:
            with trio.move_on_after(quiet_s) as quiet:
                async with trio.open_nursery() as nursery:
                    for sub in subs:
                        nursery.start_soon(sub.receive)
            if quiet.cancelled_caught:
                return


async def saturation(
    pub: Publisher, subs: list[Subscriber], first: int, events: int, time_limit: float
) -> dict[str, Any]:
    """Publish events ``first`` .. ``first + events - 1`` as fast as the system takes
    them; delivered events/s from the first publish to the last delivery."""
    stop = first + events
    counts = [0] * len(subs)
    last = [0.0]

    async def consume(i: int, sub: Subscriber) -> None:
        while counts[i] < events:
            samples = await sub.receive()
            counts[i] += sum(1 for seq, _ in samples if first <= seq < stop)
            last[0] = time.perf_counter()

    start = time.perf_counter()
    with trio.move_on_after(time_limit) as limit:
        async with trio.open_nursery() as nursery:
            for i, sub in enumerate(subs):
                nursery.start_soon(consume, i, sub)
            for batch in range(first, stop, PUBLISH_BATCH):
                await pub.publish(range(batch, min(batch + PUBLISH_BATCH, stop)))
    delivered = sum(counts)
    elapsed = max(last[0] - start, 1e-9)
    if delivered < events * len(subs):
        await drain(subs)
    return {
        "events": events,
        "fanout": len(subs),
        "delivered": delivered,
        "lost": events * len(subs) - delivered,
        "time_limited": limit.cancelled_caught,
        "elapsed_s": round(elapsed, 4),
        "events_per_s": round(delivered / len(subs) / elapsed, 1),
        "deliveries_per_s": round(delivered / elapsed, 1),
    }


async def rate_limited(
    pubs: list[Publisher],
    subs: list[Subscriber],
    first: int,
    count: int,
    rate: float,
    time_limit: float = 10.0,
) -> tuple[list[Sample], float]:
    """Publish ``count`` events at ``rate``/s on trio's clock, event ``first + i`` by
    ``pubs[i % len(pubs)]`` (events due at the same wake-up go in one batch); return the
    samples of every subscriber and the achieved publication rate. Waits at most
    ``time_limit`` seconds after the last publication for the deliveries."""
    stop = first + count
    samples: list[Sample] = []
    expected = count * len(subs)
    done = trio.Event()

    async def collect(sub: Subscriber) -> None:
        while True:
            samples.extend(s for s in await sub.receive() if first <= s[0] < stop)
            if len(samples) >= expected:
                done.set()

    start = last_publish = trio.current_time()
    sent = 0
    async with trio.open_nursery() as nursery:
        for sub in subs:
            nursery.start_soon(collect, sub)
        with trio.move_on_after(count / rate + time_limit):
            while sent < count:
                due = min(count, int((trio.current_time() - start) * rate) + 1)
                for k, pub in enumerate(pubs):
                    seqs = range(first + sent + (k - sent) % len(pubs), first + due, len(pubs))
                    if seqs:
                        await pub.publish(seqs)
                last_publish = trio.current_time()
                sent = max(sent, due)
                await trio.sleep_until(start + sent / rate)
            with trio.move_on_after(time_limit):
                await done.wait()
        nursery.cancel_scope.cancel()
    if len(samples) < expected:
        await drain(subs)
    return samples, sent / max(last_publish - start, 1 / rate)


async def latency(
    pub: Publisher, subs: list[Subscriber], first: int, count: int, rate: float
) -> dict[str, Any]:
    """Delivery latency of ``count`` events published at ``rate``/s."""
    samples, achieved = await rate_limited([pub], subs, first, count, rate)
    return {
        "rate": round(rate, 1),
        "achieved_rate": round(achieved, 1),
        "events": count,
        "received": len(samples),
        "lost": count * len(subs) - len(samples),
        **latency_summary([lat for _, lat in samples]),
    }


async def fanout_run(system: System, fanout: int, settings: Settings) -> dict[str, Any]:
    """One repetition of one system with ``fanout`` subscribers: saturation, then latency
    at 500 events/s and at 50 % of that saturation."""
    async with AsyncExitStack() as stack:
        await system.install_filler(stack, TOTAL_SUBSCRIPTIONS - fanout)
        pub = await system.publisher(stack)
        subs = [await system.subscriber(stack) for _ in range(fanout)]
        events = max(1000, int(settings.events * system.events_scale))
        seq = itertools.count(0, 10 * events)  # each phase its own range of event numbers
        await saturation(pub, subs, next(seq), events // 10, SATURATION_TIME_LIMIT_S)  # warm-up
        sat = await saturation(pub, subs, next(seq), events, SATURATION_TIME_LIMIT_S)
        if sat["events_per_s"] > LOW_RATE:
            low_count = int(LOW_RATE * settings.latency_s)
            low = await latency(pub, subs, next(seq), low_count, LOW_RATE)
        else:  # the backlog, and so the latency, would only grow with the run's length
            low = {"rate": LOW_RATE, "skipped": "saturation below this rate", "lost": 0}
            low |= latency_summary([])
        half = sat["events_per_s"] / 2
        half_count = max(100, min(events, int(half * settings.latency_s)))
        at_half = await latency(pub, subs, next(seq), half_count, half)
    return {"saturation": sat, "latency_500": low, "latency_half_saturation": at_half}


def _median_of(runs: list[dict[str, Any]], *path: str) -> float | None:
    values = []
    for run in runs:
        value: Any = run
        for key in path:
            value = value[key]
        if value is not None:
            values.append(value)
    return round(median(values), 1) if values else None


def summarize_fanout(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over the repetitions of one system and fan-out, with the raw runs."""
    return {
        "events_per_s": _median_of(runs, "saturation", "events_per_s"),
        "deliveries_per_s": _median_of(runs, "saturation", "deliveries_per_s"),
        "events_per_run": runs[0]["saturation"]["events"],
        "lost": sum(r["saturation"]["lost"] for r in runs),
        "latency_500": {
            "p50_us": _median_of(runs, "latency_500", "p50_us"),
            "p99_us": _median_of(runs, "latency_500", "p99_us"),
            "lost": sum(r["latency_500"]["lost"] for r in runs),
        },
        "latency_half_saturation": {
            "rate": _median_of(runs, "latency_half_saturation", "rate"),
            "p50_us": _median_of(runs, "latency_half_saturation", "p50_us"),
            "p99_us": _median_of(runs, "latency_half_saturation", "p99_us"),
            "lost": sum(r["latency_half_saturation"]["lost"] for r in runs),
        },
        "repetitions": len(runs),
        "runs": runs,
    }


def compare_fanout(
    systems: list[System], settings: Settings, workdir: Path
) -> dict[str, dict[str, Any]]:
    """Every system at every fan-out, alternating within each repetition; per system
    ``{"fanout1": summary, "fanout4": summary}``, or ``{"errors": [...]}`` for a system
    that failed in every repetition (a failing repetition is reported, not hidden)."""
    runs: dict[str, dict[int, list[dict[str, Any]]]] = {
        s.name: {f: [] for f in FANOUTS} for s in systems
    }
    errors: dict[str, list[str]] = {s.name: [] for s in systems}
    for rep in range(settings.reps):
        for system in systems if rep % 2 == 0 else systems[::-1]:
            try:
                system.start(workdir)
                for fanout in FANOUTS:
                    result = trio.run(fanout_run, system, fanout, settings)
                    result["repetition"] = rep
                    runs[system.name][fanout].append(result)
                    sat, low = result["saturation"], result["latency_500"]
                    print(
                        f"rep {rep} {system.name:9s} 1-to-{fanout}: "
                        f"{sat['events_per_s']:>9.0f} events/s (lost {sat['lost']}), "
                        f"p50 at 500/s {low['p50_us']} us",
                        file=sys.stderr,
                    )
            except Exception as exc:  # reported in the results, never silently dropped
                errors[system.name].append(f"rep {rep}: {type(exc).__name__}: {exc}")
                print(f"rep {rep} {system.name}: FAILED: {exc!r}", file=sys.stderr)
            finally:
                system.stop()
    out: dict[str, dict[str, Any]] = {}
    for system in systems:
        per_fanout = runs[system.name]
        if all(per_fanout[f] for f in FANOUTS):
            out[system.name] = {f"fanout{f}": summarize_fanout(per_fanout[f]) for f in FANOUTS}
            if errors[system.name]:
                out[system.name]["errors"] = errors[system.name]
        else:
            out[system.name] = {"errors": errors[system.name] or ["no complete repetition"]}
    return out


def ratios(ours: dict[str, Any], baseline: dict[str, Any]) -> dict[str, Any]:
    """Ours / baseline per fan-out: throughput and latency p50 at 500 events/s."""

    def ratio(a: float | None, b: float | None) -> float | None:
        return round(a / b, 3) if a is not None and b else None

    out = {}
    for f in FANOUTS:
        key = f"fanout{f}"
        if key in ours and key in baseline:
            out[key] = {
                "events_per_s": ratio(ours[key]["events_per_s"], baseline[key]["events_per_s"]),
                "latency_500_p50": ratio(
                    ours[key]["latency_500"]["p50_us"], baseline[key]["latency_500"]["p50_us"]
                ),
            }
    return out


def fanout_sections(measured: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The ``link`` section (the relay) and the ``hop`` section (our broker, with its
    ratios to ``link``) from ``compare_fanout``'s results, for those measured."""
    sections: dict[str, Any] = {}
    if "relay" in measured:
        sections["link"] = {"system": "bench.relay, raw framing client", **measured["relay"]}
    if "hop" in measured:
        hop = measured["hop"]
        sections["hop"] = {
            "system": "one broker, our trio client",
            "subscriptions_installed": TOTAL_SUBSCRIPTIONS,
            **hop,
        }
        if "relay" in measured:
            sections["hop"]["ratio_to_link"] = ratios(hop, measured["relay"])
    return sections


# --- chain -----------------------------------------------------------------------------


def chain_result(samples: list[Sample], first: int, count: int) -> dict[str, Any]:
    """Latency via 1 node (even events) and via CHAIN_LENGTH nodes (odd events)."""
    near = [lat for seq, lat in samples if (seq - first) % 2 == 0]
    far = [lat for seq, lat in samples if (seq - first) % 2 == 1]
    per_hop = None
    if near and far:
        per_hop = (percentile(far, 50) - percentile(near, 50)) / 1000 / (CHAIN_LENGTH - 1)
    return {
        "one_node": latency_summary(near),
        f"{CHAIN_LENGTH}_nodes": latency_summary(far),
        "lost": count - len(samples),
        "per_hop_us": None if per_hop is None else round(per_hop, 1),
    }


CHAIN_CONDITIONS = ("as_is", "cpus_kept_awake")
"""Each chain is measured on the machine as it is, and with every CPU kept from idling
(`bench.awake`): the difference is what waking idle CPUs adds to a hop."""


async def chain_reps(
    systems: list[System], settings: Settings
) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """Connect to every chain once (filler, subscriber, a publisher at each end), then
    alternate the conditions and, within each, the chains' latency runs, repetition
    after repetition: runs[condition][system name]."""
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {
        c: {s.name: [] for s in systems} for c in CHAIN_CONDITIONS
    }
    clients: dict[str, tuple[list[Publisher], list[Subscriber]]] = {}
    async with AsyncExitStack() as stack:
        for system in systems:
            await system.install_filler(stack, TOTAL_SUBSCRIPTIONS - 1, node=1)
            subs = [await system.subscriber(stack, node=1)]
            pubs = [await system.publisher(stack, 1), await system.publisher(stack, CHAIN_LENGTH)]
            await rate_limited(pubs, subs, 0, 100, CHAIN_RATE)  # warm-up
            clients[system.name] = (pubs, subs)
        for rep in range(settings.reps):
            order = CHAIN_CONDITIONS if rep % 2 == 0 else CHAIN_CONDITIONS[::-1]
            for k, condition in enumerate(order):
                first = (rep * len(order) + k + 1) * 1_000_000
                with cpus_kept_awake() if condition == "cpus_kept_awake" else nullcontext():
                    for system in systems if rep % 2 == 0 else systems[::-1]:
                        count = settings.chain_events
                        samples, _ = await rate_limited(
                            *clients[system.name], first, count, CHAIN_RATE
                        )
                        result = chain_result(samples, first, count)
                        runs[condition][system.name].append(result)
                        print(
                            f"rep {rep} {condition} {system.name}: per hop "
                            f"{result['per_hop_us']} us (p50 {result['one_node']['p50_us']} / "
                            f"{result[f'{CHAIN_LENGTH}_nodes']['p50_us']} us)",
                            file=sys.stderr,
                        )
    return runs


def run_chain(settings: Settings, workdir: Path) -> dict[str, Any]:
    """Per-hop added latency of a chain of brokers and of a chain of relays, as is and
    with the CPUs kept awake."""
    systems: list[System] = [HopSystem(CHAIN_LENGTH), RelaySystem(CHAIN_LENGTH)]
    try:
        for system in systems:
            system.start(workdir)
        runs = trio.run(chain_reps, systems, settings)
    finally:
        for system in systems:
            system.stop()

    def summary(rs: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "per_hop_us": _median_of(rs, "per_hop_us"),
            "one_node_p50_us": _median_of(rs, "one_node", "p50_us"),
            "one_node_p99_us": _median_of(rs, "one_node", "p99_us"),
            f"{CHAIN_LENGTH}_nodes_p50_us": _median_of(rs, f"{CHAIN_LENGTH}_nodes", "p50_us"),
            f"{CHAIN_LENGTH}_nodes_p99_us": _median_of(rs, f"{CHAIN_LENGTH}_nodes", "p99_us"),
            "lost": sum(r["lost"] for r in rs),
            "runs": rs,
        }

    def compared(condition: str) -> dict[str, Any]:
        hop = summary(runs[condition][systems[0].name])
        relay = summary(runs[condition][systems[1].name])
        return {
            "hop": hop,
            "relay": relay,
            "per_hop_ratio_to_relay": (
                round(hop["per_hop_us"] / relay["per_hop_us"], 2)
                if hop["per_hop_us"] is not None and relay["per_hop_us"]
                else None
            ),
        }

    return {
        "length": CHAIN_LENGTH,
        "rate": CHAIN_RATE,
        "events_per_run": settings.chain_events,
        "repetitions": settings.reps,
        **compared("as_is"),
        "cpus_kept_awake": compared("cpus_kept_awake"),
    }


# --- memory ----------------------------------------------------------------------------

SLOW_PAYLOAD = b"x" * 1024
SLOW_READ_BYTES = 16384
SLOW_READ_EVERY_S = 0.01
SLOW_MAX_EVENTS = 1_000_000
SLOW_GROWTH_LIMIT_MB = 50.0
SUBSCRIPTIONS_LIMIT_MB = 300.0
INSTALL_WINDOW = 2000
INSTALL_BATCH = 200


def wire_filters(count: int) -> list[list[list[Any]]]:
    """``count`` distinct filters (wire form) of three shapes: an equality and a range,
    an equality and a bound, three ranges."""
    shapes = [
        lambda k: [["family", "=", k % 2000], ["price", "<", float(k % 997)]],
        lambda k: [["region", "=", f"R{k % 50}"], ["quantity", ">=", k]],
        lambda k: [["price", ">=", float(k % 1000)], ["price", "<=", k + 0.5], ["rating", ">", 3]],
    ]
    return [shapes[k % 3](k) for k in range(count)]


async def hold_subscriptions(address: tuple[str, int], pid: int, count: int) -> dict[str, Any]:
    """Install ``count`` subscriptions over raw protocol connections, as many clients
    would: each connection holds at most the broker's per-connection limit
    (``Limits.max_subscriptions``), and answers the broker's heartbeat pings while it
    waits for the others (else the broker cuts it as silent). The broker's RSS while
    all of them are held."""
    filters = wire_filters(count)
    per_connection = Limits().max_subscriptions
    streams: list[trio.SocketStream] = []
    try:
        async with trio.open_nursery() as nursery:
            start = time.perf_counter()
            for first in range(0, count, per_connection):
                stream = await trio.open_tcp_stream(*address)
                streams.append(stream)
                chunk = filters[first : first + per_connection]
                conn = await _install(stream, f"bench-memory-{len(streams)}", chunk)
                nursery.start_soon(_answer_pings, stream, conn)
            install_s = time.perf_counter() - start
            stream = await trio.open_tcp_stream(*address)
            streams.append(stream)
            conn = await _say_hello(stream, "bench-memory")
            await stream.send_all(conn.send(StatsRequest()))
            stats = await _read_until(stream, conn, Stats)
            if stats.stats["subscriptions"] != count:  # a connection was cut: no number
                raise RuntimeError(f"the broker holds {stats.stats['subscriptions']} of {count}")
            await trio.sleep(0.2)
            rss = rss_mb(pid)
            nursery.cancel_scope.cancel()
        return {
            "subscriptions": stats.stats["subscriptions"],
            "connections": len(streams) - 1,
            "install_s": round(install_s, 2),
            "subscribes_per_s": round(count / install_s, 1),
            "rss_mb": round(rss, 1),
        }
    finally:
        for stream in streams:
            await trio.aclose_forcefully(stream)


async def _answer_pings(stream: trio.SocketStream, conn: Connection) -> None:
    """Answer every Ping on a raw connection with Pong, as a client does."""
    while data := await stream.receive_some(READ_SIZE):
        for message in conn.receive_data(data):
            if type(message) is Ping:
                await stream.send_all(conn.send(Pong(message.nonce)))


async def _install(
    stream: trio.SocketStream, name: str, filters: list[list[list[Any]]]
) -> Connection:
    """Subscribe ``filters`` as client ``name`` on a new ``stream``, pipelined (at most
    INSTALL_WINDOW unacknowledged); return its connection once all are acknowledged."""
    conn = await _say_hello(stream, name)
    tokens_in, tokens_out = trio.open_memory_channel[None](INSTALL_WINDOW)
    count = len(filters)

    async def read_acks() -> None:
        acked = 0
        while acked < count:
            data = await stream.receive_some(READ_SIZE)
            if not data:
                raise ConnectionError("the broker closed the connection")
            for message in conn.receive_data(data):
                if type(message) is SubAck:
                    tokens_out.receive_nowait()
                    acked += 1
                elif type(message) is Error:
                    raise ConnectionError(f"the broker refused: {message.message}")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(read_acks)
        for batch in range(0, count, INSTALL_BATCH):
            frames = []
            for sub_id in range(batch, min(batch + INSTALL_BATCH, count)):
                await tokens_in.send(None)
                frames.append(conn.send(Subscribe(sub_id + 1, filters[sub_id])))
            await stream.send_all(b"".join(frames))
    return conn


async def slow_subscriber(address: tuple[str, int], pid: int, seconds: float) -> dict[str, Any]:
    """A publisher as fast as it can against a subscriber reading 16 KiB per 10 ms, for
    ``seconds`` (and at most SLOW_MAX_EVENTS events); the broker's RSS every 50 ms."""
    published = consumed = 0
    timeline: list[tuple[float, float]] = []
    async with AsyncExitStack() as stack:
        pub = await open_hop(stack, address, "bench-fast-pub")
        stream = await trio.open_tcp_stream(*address)
        stack.push_async_callback(trio.aclose_forcefully, stream)  # closed first
        conn = await _say_hello(stream, "bench-slow-sub")
        await stream.send_all(conn.send(Subscribe(1, parse_filter(MATCHING_FILTER).to_wire())))
        await _read_until(stream, conn, SubAck)
        rss_before = rss_mb(pid)
        start = trio.current_time()

        async def publish() -> None:
            nonlocal published
            for seq in range(SLOW_MAX_EVENTS):
                await pub.publish(event_attributes(seq, SLOW_PAYLOAD))
                published += 1

        async def read_slowly() -> None:
            nonlocal consumed
            while True:
                data = await stream.receive_some(SLOW_READ_BYTES)
                consumed += sum(type(m) is Deliver for m in conn.receive_data(data))
                await trio.sleep(SLOW_READ_EVERY_S)

        async def sample() -> None:
            while True:
                timeline.append((round(trio.current_time() - start, 2), round(rss_mb(pid), 1)))
                await trio.sleep(0.05)

        with trio.move_on_after(seconds):
            async with trio.open_nursery() as nursery:
                for task in (publish, read_slowly, sample):
                    nursery.start_soon(task)
        elapsed = trio.current_time() - start
    peak = max(rss for _, rss in timeline)
    growth = peak - rss_before
    return {
        "seconds": round(elapsed, 2),
        "payload_bytes": len(SLOW_PAYLOAD),
        "published": published,
        "consumed": consumed,
        "backlog_events": published - consumed,
        "publish_rate": round(published / elapsed, 1),
        "consume_rate": round(consumed / elapsed, 1),
        "rss_before_mb": round(rss_before, 1),
        "rss_peak_mb": round(peak, 1),
        "rss_growth_mb": round(growth, 1),
        "growth_limit_mb": SLOW_GROWTH_LIMIT_MB,
        "target_met": growth < SLOW_GROWTH_LIMIT_MB,
        "timeline_s_mb": timeline[:: max(1, len(timeline) // 40)],
    }


async def _say_hello(stream: trio.SocketStream, name: str) -> Connection:
    """Open a raw client protocol connection on ``stream`` as client ``name``."""
    conn = Connection("initiator")
    await stream.send_all(conn.send(Hello(PROTOCOL_VERSION, "client", name)))
    await _read_until(stream, conn, Welcome)
    return conn


async def _read_until(stream: trio.SocketStream, conn: Connection, kind: type[M]) -> M:
    """Read from a raw protocol connection until a message of type ``kind``; return it."""
    while True:
        data = await stream.receive_some(READ_SIZE)
        if not data:
            raise ConnectionError("the broker closed the connection")
        for message in conn.receive_data(data):
            if type(message) is kind:
                return message


def run_memory(settings: Settings, workdir: Path) -> dict[str, Any]:
    """RSS of a broker holding many subscriptions, and under a slow subscriber."""
    result: dict[str, Any] = {}
    broker = HopSystem()
    broker.start(workdir)
    try:
        idle = rss_mb(broker.pid())
        held = trio.run(
            hold_subscriptions, broker.address(1), broker.pid(), settings.memory_subscriptions
        )
        result["subscriptions"] = {
            "rss_idle_mb": round(idle, 1),
            **held,
            "limit_mb": SUBSCRIPTIONS_LIMIT_MB,
            "target_met": held["rss_mb"] < SUBSCRIPTIONS_LIMIT_MB,
        }
        print(f"memory: {held}", file=sys.stderr)
    finally:
        broker.stop()
    broker = HopSystem()
    broker.start(workdir)
    try:
        slow = trio.run(
            slow_subscriber, broker.address(1), broker.pid(), settings.slow_subscriber_s
        )
        result["slow_subscriber"] = slow
        print(
            f"slow subscriber: RSS growth {slow['rss_growth_mb']} MB, "
            f"published {slow['published']}, consumed {slow['consumed']}",
            file=sys.stderr,
        )
    finally:
        broker.stop()
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer events and repetitions")
    args = parser.parse_args(argv)
    unwind_on_termination()  # stop what it started also when killed with SIGTERM
    settings = Settings.quick() if args.quick else Settings.full()
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        workdir = Path(tmp)
        result = fanout_sections(compare_fanout([RelaySystem(), HopSystem()], settings, workdir))
        result["chain"] = run_chain(settings, workdir)
        result["memory"] = run_memory(settings, workdir)
    print(write_result("throughput", result))


if __name__ == "__main__":
    main()
