"""Our client library as a user meets it, beside Mosquitto driven by gmqtt and paho-mqtt.

``python -m bench.client_api [--quick] [--repeats N] [--only SYSTEM ...]`` writes
bench/results/client_api.json (``--quick``: client_api_quick.json, ``--out`` names
another file); ``python -m bench.client_api --table RESULT.json`` prints its markdown
table (docs/performance.md).

The setting: one broker process holding 1000 subscriptions (the subscribers' own and
1000 - fan-out filler subscriptions that no event matches, on an idle connection of a
process of their own); one publisher process and 1 or 4 subscriber processes, each
written as a user would write it with the client's public API; events of 150 bytes
on the wire (a hop Publish frame; an MQTT PUBLISH packet of QoS 0). Systems:

* ``hop-trio``: ``hop broker`` and ``client.open_client``: ``await c.publish(event)``
  in a loop, ``await sub.next_batch()``;
* ``hop-trio-handler``: the same, but the subscriber hands each delivery to a handler
  (``await c.subscribe(filter, handler=...)``), as gmqtt's and paho's ``on_message``;
* ``hop-asyncio``: the same broker and ``client.open_asyncio_client``: ``await
  c.publish(event)`` in a loop, ``await sub.next_batch()``, on asyncio's event loop as
  gmqtt runs;
* ``hop-asyncio-handler``: the same, but the subscriber hands each delivery to a handler,
  as gmqtt's ``on_message``;
* ``hop-blocking``: the same broker and ``client.Client``: ``c.publish(event)`` in a
  loop, ``sub.next_delivery()``;
* ``hop-blocking-handler``: the same, but the subscriber's deliveries go to a handler
  in the client's I/O thread (``c.subscribe(filter, handler=...)``), as paho's
  ``on_message`` runs in its network thread;
* ``mosquitto-gmqtt``: Mosquitto and gmqtt (asyncio): ``client.publish(topic,
  payload)`` in a loop, an ``on_message`` callback;
* ``mosquitto-paho``: Mosquitto and paho-mqtt (its network thread, ``loop_start``):
  ``client.publish(topic, payload)`` in a loop, an ``on_message`` callback;
* ``hop-asyncio-uvloop``, ``mosquitto-gmqtt-uvloop``: ``hop-asyncio`` and
  ``mosquitto-gmqtt`` with their clients on uvloop (``uvloop.run(main())``), as many
  gmqtt users run them.

The MQTT payload is the event packed with msgpack, unpacked by the subscriber, as a
user would carry such events over MQTT; a hop event needs no packing. A missing MQTT
client (``pip install -e '.[bench]'``) or Mosquitto (installed with apt-get when
missing, as root) skips its systems with a message saying why.

Measured per repetition and system, systems alternating (order reversed every other
repetition): saturation 1-to-1 and 1-to-4 (events published as fast as the publisher's
loop goes; events/s per subscriber from the first publish to the last delivery, on
the wall clock all processes share), and latency 1-to-1 at 500 events/s (each event
carries ``time.time_ns()`` taken just before its publish call; its latency is
``time.time_ns()`` when the subscriber's code has it, minus that; p50 and p99). Each
process also reports its CPU time per event (user + system): a noisy machine blurs
rates more than CPU times. Reported: medians over repetitions, with every sample,
and for each target the ratio ours / baseline within each repetition (the two ran
one after the other in it) with the number of repetitions ours won.

Targets: hop-trio 1-to-1 and 1-to-4 at least mosquitto-gmqtt's rate and its p50 at
500/s at most theirs; hop-blocking at least mosquitto-paho's rate. hop-asyncio, the
asyncio counterpart of gmqtt, is held to hop-trio's targets, and so is
hop-asyncio-uvloop against mosquitto-gmqtt-uvloop.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import importlib.util
import json
import os
import select
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from contextlib import AsyncExitStack, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import msgpack
import trio

from bench.common import REPO, lookup, median, p_text, paired_ratios, sign_test_p, write_result
from bench.throughput import (
    HOST,
    MATCHING_FILTER,
    TOTAL_SUBSCRIPTIONS,
    HopSystem,
    filler_filters,
    percentile,
    subscribe_all,
)
from broker.process import process_cpu_s

SYSTEMS = (
    "hop-trio",
    "hop-trio-handler",
    "hop-asyncio",
    "hop-asyncio-handler",
    "hop-blocking",
    "hop-blocking-handler",
    "mosquitto-gmqtt",
    "mosquitto-paho",
    "hop-asyncio-uvloop",
    "mosquitto-gmqtt-uvloop",
)
FANOUTS = (1, 4)
LOW_RATE = 500.0
FRAME_BYTES = 150
TOPIC = "bench/events"
QUIET_S = 5.0  # a subscriber gives up this long after its last event
READY_TIMEOUT_S = 60.0
RUN_TIMEOUT_S = 120.0
TIMELINE_ENV = "HOP_BENCH_TIMELINE"
"""Set to a directory, it has the publisher and the subscriber note their wakes, reads
and writes there (`bench.timeline_probe`; pub.json, sub.json: a run of one of each),
and the subscriber its events' arrivals: what `bench.latency_path` reads."""
RATE_TARGETS = (
    # (what, where in a summary, higher is better)
    ("1-to-1 events/s", ("fanout1", "events_per_s"), True),
    ("1-to-4 events/s", ("fanout4", "events_per_s"), True),
)
LATENCY_TARGET = ("p50 at 500/s", ("latency_500", "p50_us"), False)
TARGETS = tuple(
    (what, ours, baseline, path, higher)
    for ours, baseline, held_to in (
        ("hop-trio", "mosquitto-gmqtt", (*RATE_TARGETS, LATENCY_TARGET)),
        ("hop-asyncio", "mosquitto-gmqtt", (*RATE_TARGETS, LATENCY_TARGET)),
        ("hop-blocking", "mosquitto-paho", RATE_TARGETS),
        ("hop-asyncio-uvloop", "mosquitto-gmqtt-uvloop", (*RATE_TARGETS, LATENCY_TARGET)),
    )
    for what, path, higher in held_to
)


@dataclass(frozen=True)
class Settings:
    """Sizes of a run."""

    repeats: int
    events: int  # per saturation run
    latency_s: float  # length of the latency run at LOW_RATE

    @classmethod
    def quick(cls) -> Settings:
        return cls(1, 20_000, 1.0)

    @classmethod
    def full(cls) -> Settings:
        return cls(5, 100_000, 4.0)


# --- events ----------------------------------------------------------------------------


def event(seq: int, padding: bytes) -> dict[str, Any]:
    """Event ``seq``, stamped now (``t``): what every publisher publishes."""
    return {"type": "bench", "family": 0, "price": 50.0, "n": seq, "t": time.time_ns(),
            "payload": padding}  # fmt: skip


def _padding(frame_bytes: Callable[[bytes], int]) -> bytes:
    """The payload that makes ``frame_bytes(payload)`` FRAME_BYTES long."""
    size = frame_bytes(b"")
    return b"x" * max(0, FRAME_BYTES - size)


def hop_padding(name: str) -> bytes:
    from broker.protocol import new_event_frame

    def size(pad: bytes) -> int:
        return len(new_event_frame(f"{name}:100000", name, event(100_000, pad), time.time_ns()))

    return _padding(size)


def mqtt_padding() -> bytes:
    def size(pad: bytes) -> int:
        payload = msgpack.packb(event(100_000, pad))
        return 1 + 2 + 2 + len(TOPIC) + len(payload)  # header, remaining length, topic

    return _padding(size)


# --- worker processes ------------------------------------------------------------------


@dataclass
class Job:
    """What one worker process does: ``role`` pub, sub or filler, of ``client``."""

    role: str
    client: str  # trio, asyncio, blocking, gmqtt, paho; some with -handler or -uvloop
    port: int
    count: int  # events to publish or receive; subscriptions for a filler
    rate: float = 0.0  # events/s of a publisher; 0: as fast as it goes
    name: str = "bench"


class Tally:
    """What a subscriber counts: events, the last arrival, latencies if asked (and for
    our clients, each delivery's hand-off: from its frame's decoding to the code)."""

    def __init__(self, count: int, latencies: bool) -> None:
        self.count = count
        self.received = 0
        self.t_last_ns = 0
        self.latencies: list[int] | None = [] if latencies else None
        self.handoffs: list[int] = []
        self.arrivals: list[int] | None = [] if latencies and os.environ.get(TIMELINE_ENV) else None
        self.cpu_start = time.process_time()  # reset when the subscriber is ready

    def took(self, events: list[dict[str, Any]]) -> bool:
        """Count ``events``, just handed to the subscriber's code; True once all came."""
        return self._count(events, time.time_ns())

    def took_deliveries(self, deliveries: list[Any]) -> bool:
        """``took`` of our clients' deliveries (``client.Delivery``), noting each one's
        hand-off (now minus ``t_deliver_ns``, when the client decoded its frame)."""
        now = time.time_ns()
        if self.latencies is not None:
            self.handoffs += [now - d.t_deliver_ns for d in deliveries]
        return self._count([d.attributes for d in deliveries], now)

    def _count(self, events: list[dict[str, Any]], now: int) -> bool:
        self.received += len(events)
        self.t_last_ns = now
        if self.latencies is not None:
            self.latencies += [now - e["t"] for e in events]
            if self.arrivals is not None:
                self.arrivals += [now] * len(events)
        return self.received >= self.count

    def result(self) -> dict[str, Any]:
        cpu_s = time.process_time() - self.cpu_start  # (the run ends at its last event)
        return {"received": self.received, "t_last_ns": self.t_last_ns, "cpu_s": cpu_s,
                "latencies_ns": self.latencies, "handoffs_ns": self.handoffs,
                "arrivals_ns": self.arrivals}  # fmt: skip


def _ready(tally: Tally | None = None) -> None:
    print("ready", flush=True)
    if tally is not None:
        tally.cpu_start = time.process_time()


def _pace(rate: float, start: float, i: int) -> float:
    """Seconds until event ``i`` is due (time.monotonic clock)."""
    return start + i / rate - time.monotonic() if rate else 0.0


# hop, trio


async def _hop_pub(
    job: Job, open_client: Callable[..., Any], sleep: Callable[[float], Awaitable[None]]
) -> dict[str, Any]:
    """A publisher of our async clients: ``open_client`` and ``sleep`` are the trio or
    the asyncio client's and event loop's."""
    async with open_client(HOST, job.port, name=job.name) as c:
        padding = hop_padding(job.name)
        _ready()
        t_first, cpu = time.time_ns(), time.process_time()
        start = time.monotonic()
        for i in range(job.count):
            if job.rate:
                await sleep(max(0.0, _pace(job.rate, start, i)))
            await c.publish(event(i, padding))
        await c.flush()
    return {"t_first_ns": t_first, "cpu_s": time.process_time() - cpu}


async def _trio_pub(job: Job) -> dict[str, Any]:
    import client

    return await _hop_pub(job, client.open_client, trio.sleep)


async def _trio_sub(job: Job) -> dict[str, Any]:
    import client

    tally = Tally(job.count, job.rate > 0)
    async with client.open_client(HOST, job.port, name=job.name) as c:
        sub = await c.subscribe(MATCHING_FILTER)
        _ready(tally)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_watchdog, tally, nursery.cancel_scope)
            while True:  # the loop as a user writes it: no timeout per batch
                batch = await sub.next_batch()
                if tally.took_deliveries(batch):
                    break
            nursery.cancel_scope.cancel()
    return tally.result()


async def _trio_handler_sub(job: Job) -> dict[str, Any]:
    import client

    tally = Tally(job.count, job.rate > 0)
    async with client.open_client(HOST, job.port, name=job.name) as c:
        done = trio.Event()

        def handler(delivery: client.Delivery) -> None:
            if tally.took_deliveries([delivery]):
                done.set()

        await c.subscribe(MATCHING_FILTER, handler=handler)
        _ready(tally)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_watchdog, tally, nursery.cancel_scope)
            await done.wait()
            nursery.cancel_scope.cancel()
    return tally.result()


async def _watchdog(tally: Tally, scope: trio.CancelScope) -> None:
    """Cancel ``scope`` once the subscriber heard nothing for QUIET_S (events lost) or
    after RUN_TIMEOUT_S."""
    deadline = trio.current_time() + RUN_TIMEOUT_S
    last, quiet_since = -1, trio.current_time()
    while trio.current_time() < deadline:
        await trio.sleep(0.25)
        if tally.received != last:
            last, quiet_since = tally.received, trio.current_time()
        elif trio.current_time() - quiet_since > QUIET_S:
            break
    scope.cancel()


async def _trio_filler(job: Job) -> dict[str, Any]:
    import client

    async with client.open_client(HOST, job.port, name=job.name) as c:
        await subscribe_all(c, filler_filters(job.count))
        _ready()
        await trio.to_thread.run_sync(sys.stdin.read)  # until the parent closes it
    return {}


# hop, asyncio


async def _asyncio_pub(job: Job) -> dict[str, Any]:
    import client

    return await _hop_pub(job, client.open_asyncio_client, asyncio.sleep)


async def _asyncio_sub(job: Job) -> dict[str, Any]:
    import client

    tally = Tally(job.count, job.rate > 0)
    async with client.open_asyncio_client(HOST, job.port, name=job.name) as c:
        sub = await c.subscribe(MATCHING_FILTER)
        _ready(tally)

        async def consume() -> None:
            while True:  # the loop as a user writes it: no timeout per batch
                batch = await sub.next_batch()
                if tally.took_deliveries(batch):
                    return

        await _asyncio_watchdog(tally, asyncio.ensure_future(consume()))
    return tally.result()


async def _asyncio_handler_sub(job: Job) -> dict[str, Any]:
    import client

    tally = Tally(job.count, job.rate > 0)
    async with client.open_asyncio_client(HOST, job.port, name=job.name) as c:
        done = asyncio.Event()

        def handler(delivery: client.Delivery) -> None:
            if tally.took_deliveries([delivery]):
                done.set()

        await c.subscribe(MATCHING_FILTER, handler=handler)
        _ready(tally)
        await _asyncio_watchdog(tally, asyncio.ensure_future(done.wait()))
    return tally.result()


async def _asyncio_watchdog(tally: Tally, task: asyncio.Future[Any]) -> None:
    """`_watchdog` for asyncio: wait for ``task``, cancelling it once the subscriber
    heard nothing for QUIET_S or after RUN_TIMEOUT_S."""
    deadline = time.monotonic() + RUN_TIMEOUT_S
    last, quiet_since = -1, time.monotonic()
    while not task.done() and time.monotonic() < deadline:
        await asyncio.wait({task}, timeout=0.25)
        if tally.received != last:
            last, quiet_since = tally.received, time.monotonic()
        elif time.monotonic() - quiet_since > QUIET_S:
            break
    task.cancel()
    with suppress(asyncio.CancelledError):
        await task


# hop, blocking


def _blocking_pub(job: Job) -> dict[str, Any]:
    import client

    with client.Client.connect(HOST, job.port, name=job.name) as c:
        padding = hop_padding(job.name)
        _ready()
        t_first, cpu = time.time_ns(), time.process_time()
        start = time.monotonic()
        for i in range(job.count):
            if job.rate:
                time.sleep(max(0.0, _pace(job.rate, start, i)))
            c.publish(event(i, padding))
        c.flush()
    return {"t_first_ns": t_first, "cpu_s": time.process_time() - cpu}


def _blocking_sub(job: Job) -> dict[str, Any]:
    import client

    tally = Tally(job.count, job.rate > 0)
    with client.Client.connect(HOST, job.port, name=job.name) as c:
        sub = c.subscribe(MATCHING_FILTER)
        _ready(tally)
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                delivery = sub.next_delivery(timeout=QUIET_S)
            except TimeoutError:
                break
            if tally.took_deliveries([delivery]):
                break
    return tally.result()


def _blocking_handler_sub(job: Job) -> dict[str, Any]:
    import client

    tally = Tally(job.count, job.rate > 0)
    done = threading.Event()
    last = [time.monotonic()]

    def handler(delivery: client.Delivery) -> None:
        last[0] = time.monotonic()
        if tally.took_deliveries([delivery]):
            done.set()

    with client.Client.connect(HOST, job.port, name=job.name) as c:
        c.subscribe(MATCHING_FILTER, handler=handler)
        _ready(tally)
        _until_done(done, last)
    return tally.result()


def _until_done(done: threading.Event, last: list[float]) -> None:
    """Wait for a callback subscriber's ``done``, at most QUIET_S after its last event
    (``last[0]``, time.monotonic()) and RUN_TIMEOUT_S in all."""
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while not done.wait(0.5) and time.monotonic() < min(deadline, last[0] + QUIET_S):
        pass


# MQTT: filler (any client), gmqtt, paho


async def _mqtt_filler(job: Job) -> dict[str, Any]:
    from bench.mqtt import MqttClient

    async with AsyncExitStack() as stack:
        c = await MqttClient.connect(stack, job.port, f"{job.name}-{os.getpid()}")
        await c.subscribe([f"bench/filler/{k}" for k in range(job.count)])
        _ready()
        await trio.to_thread.run_sync(sys.stdin.read)
    return {}


async def _gmqtt_connect(job: Job, on_message: Callable[..., int] | None = None) -> Any:
    from gmqtt import Client as MQTTClient
    from gmqtt.mqtt.constants import MQTTv311

    c = MQTTClient(f"{job.name}-{os.getpid()}")
    if on_message is not None:
        c.on_message = on_message
    await c.connect(HOST, job.port, version=MQTTv311)
    return c


async def _gmqtt_pub(job: Job) -> dict[str, Any]:
    c = await _gmqtt_connect(job)
    padding, pack = mqtt_padding(), msgpack.Packer().pack
    _ready()
    t_first, cpu = time.time_ns(), time.process_time()
    start = time.monotonic()
    for i in range(job.count):
        if job.rate:
            await asyncio.sleep(max(0.0, _pace(job.rate, start, i)))
        c.publish(TOPIC, pack(event(i, padding)), qos=0)
    await c.disconnect()
    return {"t_first_ns": t_first, "cpu_s": time.process_time() - cpu}


async def _gmqtt_sub(job: Job) -> dict[str, Any]:
    tally = Tally(job.count, job.rate > 0)
    done, subscribed = asyncio.Event(), asyncio.Event()
    last = [time.monotonic()]
    unpackb = msgpack.unpackb

    def on_message(client: Any, topic: str, payload: bytes, qos: int, properties: Any) -> int:
        last[0] = time.monotonic()
        if tally.took([unpackb(payload)]):
            done.set()
        return 0

    c = await _gmqtt_connect(job, on_message)
    c.on_subscribe = lambda *_: subscribed.set()
    c.subscribe(TOPIC, qos=0)
    await subscribed.wait()
    _ready(tally)
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while not done.is_set() and time.monotonic() < min(deadline, last[0] + QUIET_S):
        with suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), 0.5)
    await c.disconnect()
    return tally.result()


def _paho_client(job: Job) -> Any:
    import paho.mqtt.client as mqtt

    c = mqtt.Client(
        mqtt.CallbackAPIVersion.VERSION2, client_id=f"{job.name}-{os.getpid()}",
        protocol=mqtt.MQTTv311,
    )  # fmt: skip
    c.connect(HOST, job.port)
    c.loop_start()
    return c


def _paho_pub(job: Job) -> dict[str, Any]:
    c = _paho_client(job)
    padding, pack = mqtt_padding(), msgpack.Packer().pack
    _ready()
    t_first, cpu = time.time_ns(), time.process_time()
    start = time.monotonic()
    info = None
    for i in range(job.count):
        if job.rate:
            time.sleep(max(0.0, _pace(job.rate, start, i)))
        info = c.publish(TOPIC, pack(event(i, padding)), qos=0)
    if info is not None:
        info.wait_for_publish(RUN_TIMEOUT_S)
    c.disconnect()
    c.loop_stop()
    return {"t_first_ns": t_first, "cpu_s": time.process_time() - cpu}


def _paho_sub(job: Job) -> dict[str, Any]:
    tally = Tally(job.count, job.rate > 0)
    done, subscribed = threading.Event(), threading.Event()
    last = [time.monotonic()]
    unpackb = msgpack.unpackb

    def on_message(client: Any, userdata: Any, message: Any) -> None:
        last[0] = time.monotonic()
        if tally.took([unpackb(message.payload)]):
            done.set()

    c = _paho_client(job)
    c.on_message = on_message
    c.on_subscribe = lambda *_: subscribed.set()
    c.subscribe(TOPIC, qos=0)
    if not subscribed.wait(READY_TIMEOUT_S):
        raise RuntimeError("paho: no SUBACK")
    _ready(tally)
    _until_done(done, last)
    c.disconnect()
    c.loop_stop()
    return tally.result()


def _uvloop_run(main: Coroutine[Any, Any, dict[str, Any]]) -> dict[str, Any]:
    """``main`` on uvloop, as its users run a program (imported here: only the uvloop
    systems need it installed)."""
    import uvloop

    return uvloop.run(main)


_WORKERS: dict[tuple[str, str], Callable[[Job], Any]] = {
    ("pub", "trio"): lambda job: trio.run(_trio_pub, job),
    ("sub", "trio"): lambda job: trio.run(_trio_sub, job),
    ("filler", "trio"): lambda job: trio.run(_trio_filler, job),
    ("pub", "trio-handler"): lambda job: trio.run(_trio_pub, job),
    ("sub", "trio-handler"): lambda job: trio.run(_trio_handler_sub, job),
    ("pub", "asyncio"): lambda job: asyncio.run(_asyncio_pub(job)),
    ("sub", "asyncio"): lambda job: asyncio.run(_asyncio_sub(job)),
    ("pub", "asyncio-handler"): lambda job: asyncio.run(_asyncio_pub(job)),
    ("sub", "asyncio-handler"): lambda job: asyncio.run(_asyncio_handler_sub(job)),
    ("pub", "blocking"): _blocking_pub,
    ("sub", "blocking"): _blocking_sub,
    ("pub", "blocking-handler"): _blocking_pub,
    ("sub", "blocking-handler"): _blocking_handler_sub,
    ("filler", "mqtt"): lambda job: trio.run(_mqtt_filler, job),
    ("pub", "gmqtt"): lambda job: asyncio.run(_gmqtt_pub(job)),
    ("sub", "gmqtt"): lambda job: asyncio.run(_gmqtt_sub(job)),
    ("pub", "asyncio-uvloop"): lambda job: _uvloop_run(_asyncio_pub(job)),
    ("sub", "asyncio-uvloop"): lambda job: _uvloop_run(_asyncio_sub(job)),
    ("pub", "gmqtt-uvloop"): lambda job: _uvloop_run(_gmqtt_pub(job)),
    ("sub", "gmqtt-uvloop"): lambda job: _uvloop_run(_gmqtt_sub(job)),
    ("pub", "paho"): _paho_pub,
    ("sub", "paho"): _paho_sub,
}


def run_worker(job: Job, profile: str | None = None, timeline: str | None = None) -> None:
    """A worker process's main: do ``job``, print its result as JSON (with ``cpu_s``,
    the CPU time of its events: a publisher's from its first publish to the end, a
    subscriber's from its subscription to its last event). With ``profile``,
    cProfile's statistics of the job are written to that file; with ``timeline``, its
    wakes, reads and writes (`bench.timeline_probe`)."""
    work = _WORKERS[(job.role, job.client)]
    if timeline:
        from bench.timeline_probe import install

        install(Path(timeline))
    if profile:
        profiler = cProfile.Profile()
        result = profiler.runcall(work, job)
        profiler.dump_stats(profile)
    else:
        result = work(job)
    print(json.dumps(result), flush=True)


# --- the parent: systems, runs, summaries ----------------------------------------------


class Worker:
    """A worker process, stopped by its PID when it outlives its use."""

    def __init__(self, job: Job) -> None:
        cmd = [sys.executable, "-m", "bench.client_api", "--worker", json.dumps(job.__dict__)]
        profile_dir = os.environ.get("HOP_BENCH_PROFILE")
        if profile_dir:
            what = f"{job.client}-{job.role}-{job.name}-{job.count}-{job.rate:.0f}"
            cmd += ["--profile", f"{profile_dir}/{what}.prof"]
        timeline_dir = os.environ.get(TIMELINE_ENV)
        if timeline_dir and job.role != "filler":
            cmd += ["--timeline", f"{timeline_dir}/{job.role}.json"]
        self.job = job
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO
        )

    def wait_ready(self) -> None:
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], READY_TIMEOUT_S)
        line = self.proc.stdout.readline() if ready else ""
        if line.strip() != "ready":
            self.stop()
            raise RuntimeError(f"{self.job.client} {self.job.role} not ready: {line!r}")

    def result(self) -> dict[str, Any]:
        try:
            # (closing stdin ends a filler; the others never read it)
            out, _ = self.proc.communicate(input="", timeout=RUN_TIMEOUT_S + 30)
        except subprocess.TimeoutExpired:
            self.stop()
            raise RuntimeError(f"{self.job.client} {self.job.role} did not finish") from None
        if self.proc.returncode != 0:
            raise RuntimeError(f"{self.job.client} {self.job.role} exited {self.proc.returncode}")
        return json.loads(out.strip().splitlines()[-1])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()  # by PID
        self.proc.wait()


class BrokerProcess(Protocol):
    """What `scenario` needs of a system's broker: which clients speak to it, and the
    CPU time its process has used so far."""

    kind: str  # "hop" (our clients' protocol) or "mqtt"
    client: str  # the clients' kind (`Job.client`)

    def cpu_s(self) -> float: ...


class Broker:
    """A hop broker or Mosquitto on a free loopback port, for one system."""

    def __init__(self, system: str, mosquitto: str | None) -> None:
        self.system = system
        self.kind = "hop" if system.startswith("hop") else "mqtt"
        self.client = system.split("-", 1)[1]
        self._mosquitto = mosquitto
        self._impl: Any = None

    def start(self, workdir: Path) -> int:
        if self.kind == "hop":
            self._impl = HopSystem()
            self._impl.start(workdir)
            return int(self._impl.address(1)[1])
        from bench.mqtt import MosquittoSystem

        assert self._mosquitto is not None
        self._impl = MosquittoSystem(self._mosquitto)
        self._impl.start(workdir)
        return int(self._impl.port)

    def stop(self) -> None:
        if self._impl is not None:
            self._impl.stop()
            self._impl = None

    def cpu_s(self) -> float:
        """CPU time (user + system) the broker process has used so far."""
        return process_cpu_s(self._impl.pid(1) if self.kind == "hop" else self._impl.proc.pid)


def scenario(
    broker: BrokerProcess, port: int, fanout: int, count: int, rate: float
) -> dict[str, Any]:
    """One run: filler, ``fanout`` subscribers, then the publisher; their results."""
    published, received, broker_cpu = run_workers(broker, port, fanout, count, rate)
    run = summarize_run(published, received, count, rate)
    run["broker_cpu_us_per_event"] = round(broker_cpu / count * 1e6, 2)
    return run


def run_workers(
    broker: BrokerProcess, port: int, fanout: int, count: int, rate: float
) -> tuple[dict[str, Any], list[dict[str, Any]], float]:
    """`scenario`'s run: the publisher's and each subscriber's result as they reported
    them, and the CPU seconds the broker used meanwhile."""
    filler_client = "trio" if broker.kind == "hop" else "mqtt"
    workers: list[Worker] = []
    try:
        filler = Worker(Job("filler", filler_client, port, TOTAL_SUBSCRIPTIONS - fanout,
                            name="bench-filler"))  # fmt: skip
        workers.append(filler)
        filler.wait_ready()
        subs = [Worker(Job("sub", broker.client, port, count, rate, f"bench-sub{k}"))
                for k in range(fanout)]  # fmt: skip
        workers += subs
        for sub in subs:
            sub.wait_ready()
        pub = Worker(Job("pub", broker.client, port, count, rate, "bench-pub"))
        workers.append(pub)
        pub.wait_ready()
        broker_cpu = broker.cpu_s()
        published = pub.result()
        received = [sub.result() for sub in subs]
        broker_cpu = broker.cpu_s() - broker_cpu
        filler.result()
    finally:
        for worker in workers:
            worker.stop()
    return published, received, broker_cpu


def summarize_run(
    published: dict[str, Any], received: list[dict[str, Any]], count: int, rate: float
) -> dict[str, Any]:
    delivered = sum(r["received"] for r in received)
    elapsed = max(r["t_last_ns"] for r in received) - published["t_first_ns"]
    run: dict[str, Any] = {
        "events": count,
        "fanout": len(received),
        "lost": count * len(received) - delivered,
        "events_per_s": round(delivered / len(received) / max(elapsed, 1) * 1e9, 1),
        "pub_cpu_us_per_event": round(published["cpu_s"] / count * 1e6, 2),
        "sub_cpu_us_per_event": round(median([r["cpu_s"] for r in received]) / count * 1e6, 2),
    }
    if rate:
        latencies = [lat for r in received for lat in r["latencies_ns"] or []]
        run["rate"] = rate
        run["p50_us"] = round(percentile(latencies, 50) / 1000, 1) if latencies else None
        run["p99_us"] = round(percentile(latencies, 99) / 1000, 1) if latencies else None
        handoffs = [h for r in received for h in r.get("handoffs_ns") or []]
        if handoffs:
            run["handoff_p50_us"] = round(percentile(handoffs, 50) / 1000, 1)
    return run


def system_runs(broker: Broker, settings: Settings, workdir: Path) -> dict[str, Any]:
    """One repetition of one system: saturation 1-to-1 and 1-to-4, latency at 500/s."""
    port = broker.start(workdir)
    try:
        out = {f"fanout{f}": scenario(broker, port, f, settings.events, 0.0) for f in FANOUTS}
        out["latency_500"] = scenario(broker, port, 1, int(LOW_RATE * settings.latency_s), LOW_RATE)
    finally:
        broker.stop()
    return out


def available(systems: list[str]) -> tuple[list[str], dict[str, str], str | None]:
    """The systems that can run here, why the others cannot, and Mosquitto's path."""
    skipped: dict[str, str] = {}
    mosquitto = None
    if any(s.startswith("mosquitto") for s in systems):
        from bench.mqtt import find_mosquitto

        mosquitto, why = find_mosquitto()
        if mosquitto is None:
            skipped.update({s: why or "no mosquitto" for s in systems if s.startswith("mosq")})
    for system in systems:
        for module in ("gmqtt", "paho", "uvloop"):
            if module in system and importlib.util.find_spec(module) is None:
                skipped[system] = f"{module} is not installed: pip install -e '.[bench]'"
    for system, why in skipped.items():
        print(f"bench: skipping {system}: {why}", file=sys.stderr, flush=True)
    return [s for s in systems if s not in skipped], skipped, mosquitto


def summarize(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over repetitions of one system, with every sample."""

    def med(*path: str) -> float | None:
        values = []
        for sample in samples:
            value: Any = sample
            for key in path:
                value = value.get(key) if isinstance(value, dict) else None
            if value is not None:
                values.append(value)
        return round(median(values), 2) if values else None

    out: dict[str, Any] = {}
    for key in (*(f"fanout{f}" for f in FANOUTS), "latency_500"):
        fields = ["events_per_s", "pub_cpu_us_per_event", "sub_cpu_us_per_event"]
        fields += ["broker_cpu_us_per_event"]
        if key == "latency_500":
            fields += ["p50_us", "p99_us", "handoff_p50_us"]
        out[key] = {field: med(key, field) for field in fields}
        out[key]["lost"] = sum(s[key]["lost"] for s in samples if key in s)
    out["samples"] = samples
    return out


def targets(systems: dict[str, Any]) -> list[dict[str, Any]]:
    """Each target with both medians and whether they meet it (None: not measured),
    and the ratio ours / baseline per repetition, with how many repetitions ours won."""
    out = []
    for what, ours, base, path, higher in TARGETS:
        a = systems.get(ours, {}).get(path[0], {}).get(path[1])
        b = systems.get(base, {}).get(path[0], {}).get(path[1])
        met = None if a is None or b is None else (a >= b if higher else a <= b)

        def value_at_path(sample: dict[str, Any], path: tuple[str, str] = path) -> float | None:
            return lookup(sample, *path)

        ratios = paired_ratios(
            systems.get(ours, {}).get("samples", []),
            systems.get(base, {}).get("samples", []),
            value_at_path,
        )
        won = sum(r >= 1 if higher else r <= 1 for r in ratios)
        out.append({"what": what, "ours": ours, "baseline": base, "ours_value": a,
                    "baseline_value": b, "target_met": met, "ratios": ratios,
                    "repetitions_won": won})  # fmt: skip
    return out


def run(names: list[str], settings: Settings, workdir: Path) -> dict[str, Any]:
    systems, skipped, mosquitto = available(names)
    samples: dict[str, list[dict[str, Any]]] = {s: [] for s in systems}
    errors: dict[str, list[str]] = {}
    for rep in range(settings.repeats):
        for system in systems if rep % 2 == 0 else systems[::-1]:
            try:
                result = system_runs(Broker(system, mosquitto), settings, workdir)
            except Exception as exc:  # reported, never silently dropped
                errors.setdefault(system, []).append(f"rep {rep}: {type(exc).__name__}: {exc}")
                print(f"bench: {system} rep {rep} failed: {exc}", file=sys.stderr, flush=True)
                continue
            result["repetition"] = rep
            samples[system].append(result)
            print(f"rep {rep} {system:16s} " + _line(result), file=sys.stderr, flush=True)
    summaries = {s: summarize(v) for s, v in samples.items() if v}
    return {
        "settings": settings.__dict__,
        "frame_bytes": FRAME_BYTES,
        "subscriptions_installed": TOTAL_SUBSCRIPTIONS,
        "systems": summaries,
        "targets": targets(summaries),
        "skipped": skipped,
        "errors": errors,
    }


def _line(result: dict[str, Any]) -> str:
    f1, low = result["fanout1"], result["latency_500"]
    wider = [
        f"1-to-{f} {run['events_per_s']:>9.0f}/s (lost {run['lost']})  "
        for f in FANOUTS[1:]
        if (run := result.get(f"fanout{f}"))
    ]
    return (
        f"1-to-1 {f1['events_per_s']:>9.0f}/s (lost {f1['lost']}, cpu pub "
        f"{f1['pub_cpu_us_per_event']} sub {f1['sub_cpu_us_per_event']} "
        f"broker {f1['broker_cpu_us_per_event']} us/event)  "
        + "".join(wider)
        + f"p50 at 500/s {low['p50_us']} us"
    )


# --- the table -------------------------------------------------------------------------


def table(result: dict[str, Any]) -> str:
    """The markdown table of a result file: one row per system (CPU per event: of the
    1-to-1 saturation run), then the targets."""
    systems = result["systems"]
    rows = [
        "| system | 1-to-1 events/s | 1-to-4 events/s per subscriber | p50 at 500/s (us) "
        "| p99 at 500/s (us) | subscriber hand-off p50 (us) | publisher CPU (us/event) "
        "| subscriber CPU (us/event) | broker CPU (us/event) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]

    def cell(value: float | None, digits: int = 0) -> str:
        return "-" if value is None else f"{value:,.{digits}f}"

    for name in SYSTEMS:
        if name not in systems:
            continue
        s = systems[name]
        f1, f4, low = s["fanout1"], s["fanout4"], s["latency_500"]
        rows.append(
            f"| {name} | {cell(f1['events_per_s'])} | {cell(f4['events_per_s'])} "
            f"| {cell(low['p50_us'])} | {cell(low['p99_us'])} "
            f"| {cell(low.get('handoff_p50_us'))} "
            f"| {cell(f1['pub_cpu_us_per_event'], 2)} | {cell(f1['sub_cpu_us_per_event'], 2)} "
            f"| {cell(f1.get('broker_cpu_us_per_event'), 2)} |"
        )
    lines = ["\n".join(rows), ""]
    for t in result.get("targets", []):
        verdict = {True: "met", False: "NOT met", None: "not measured"}[t["target_met"]]
        ratios = t.get("ratios") or []
        paired = (
            f" (per repetition {median(ratios):.2f}x, {min(ratios):.2f}-{max(ratios):.2f}; "
            f"ours better in {t['repetitions_won']} of {len(ratios)}, sign test "
            f"{p_text(sign_test_p(t['repetitions_won'], len(ratios)))})"
            if ratios
            else ""
        )
        lines.append(
            f"- {t['ours']} {t['what']}: {cell(t['ours_value'])} vs {t['baseline']} "
            f"{cell(t['baseline_value'])}: {verdict}{paired}"
        )
    settings = result.get("settings", {})
    lines.append(
        f"\nMedians of {settings.get('repeats')} repetition(s), {settings.get('events')} "
        f"events per saturation run, {FRAME_BYTES}-byte events, "
        f"{result.get('subscriptions_installed')} subscriptions installed."
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    parser.add_argument("--repeats", type=int, help="repetitions (default 5; --quick: 1)")
    parser.add_argument("--events", type=int, help="events per saturation run")
    parser.add_argument("--only", nargs="+", choices=SYSTEMS, help="these systems only")
    parser.add_argument("--out", type=Path, help="result file (default bench/results/...)")
    parser.add_argument("--table", type=Path, metavar="RESULT", help="print RESULT's table")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--profile", help=argparse.SUPPRESS)
    parser.add_argument("--timeline", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        run_worker(Job(**json.loads(args.worker)), args.profile, args.timeline)
        return
    if args.table:
        result = json.loads(args.table.read_text())
        result["targets"] = targets(result["systems"])  # (files before the paired ratios)
        print(table(result))
        return
    from broker.process import unwind_on_termination

    unwind_on_termination()
    settings = Settings.quick() if args.quick else Settings.full()
    if args.repeats or args.events:
        settings = Settings(args.repeats or settings.repeats, args.events or settings.events,
                            settings.latency_s)  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="bench-client-api-") as tmp:
        result = run(list(args.only or SYSTEMS), settings, Path(tmp))
    result["mode"] = "quick" if args.quick else "full"
    name = "client_api_quick" if args.quick else "client_api"
    print(write_result(name, result, args.out))
    print(table(result))


if __name__ == "__main__":
    main()
