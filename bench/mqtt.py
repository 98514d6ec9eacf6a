"""The `amqtt` and `mosquitto` baselines: the `hop` fan-out workloads through MQTT brokers.

Each broker runs as its own process on a free loopback port, from a configuration
file written to the run's temporary folder, and is stopped by PID: amqtt (pure
Python, asyncio; pip package ``amqtt``, installed into this virtualenv when missing)
and Mosquitto (C; Debian package ``mosquitto``, installed with apt-get when missing
and running as root). A broker that cannot be had is skipped with a message saying
why; a broker that fails while measured is reported as an error.

The workload is the one of ``bench.throughput`` (1 publisher, 1 or 4 subscribers,
1000 subscriptions installed, saturation and latency at 500 events/s and at 50 % of
saturation), with topic-equality subscriptions: the subscribers subscribe to
``bench/events``, where every event is published, and the filler subscriptions to
``bench/filler/K``. amqtt is also measured bare (the subscribers' subscriptions
only), as the anchors of `bench.table` were: it matches every topic filter in turn, so the
filler costs it most of its throughput (Mosquitto's topic tree makes the filler
nearly free, so it is measured with the filler only). amqtt runs get 5 % of the
events of the others (it is that much slower); a system whose saturation is below
500 events/s gets no latency run at that rate.

Clients are the small trio MQTT 3.1.1 client below (QoS 0, clean sessions, no
keep-alive), in this process like the other systems' clients; an event's payload is
the msgpack Publish array the relay carries, so the bytes on the wire match the
other systems' 150-byte frames, and subscribers decode it. Mosquitto is configured
with TCP_NODELAY, as trio (and asyncio, for amqtt) set it on every other socket.

Our broker is measured in the same run, alternating with the MQTT brokers, so the
sections carry ``hop / amqtt`` and ``hop / mosquitto`` ratios.
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import os
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import msgpack
import trio

from bench.common import write_result
from bench.throughput import (
    HOST,
    READ_SIZE,
    HopSystem,
    Publisher,
    Sample,
    Settings,
    Subscriber,
    System,
    compare_fanout,
    fanout_sections,
    publish_wire,
    ratios,
    retry_ports,
    start_process,
    stop_process,
)
from broker.local_network import free_base_port
from broker.process import unwind_on_termination

TOPIC = "bench/events"
AMQTT_EVENTS_SCALE = 0.05  # amqtt is ~10-100x slower than the others: fewer events per run

# MQTT 3.1.1 control packet types (high nibble of the first byte).
CONNECT, CONNACK, PUBLISH, SUBSCRIBE, SUBACK = 1, 2, 3, 8, 9


def _remaining_length(n: int) -> bytes:
    out = bytearray()
    while True:
        n, digit = divmod(n, 128)
        out.append(digit | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _string(text: str) -> bytes:
    data = text.encode()
    return len(data).to_bytes(2, "big") + data


def _packet(first_byte: int, body: bytes) -> bytes:
    return bytes([first_byte]) + _remaining_length(len(body)) + body


def publish_packet(topic: bytes, payload: bytes) -> bytes:
    """A QoS 0 PUBLISH; ``topic`` already length-prefixed."""
    return _packet(PUBLISH << 4, topic + payload)


def _body_start(buffer: bytearray, pos: int, end: int) -> tuple[int, int] | None:
    """The remaining length encoded at ``pos`` and where the body starts after it, or
    None while the encoding is incomplete."""
    length = shift = 0
    while pos < end:
        byte = buffer[pos]
        pos += 1
        length |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return length, pos
        shift += 7
    return None


class PacketReader:
    """Bytes in, complete MQTT packets out as (type, flags, body)."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[tuple[int, int, bytes]]:
        buffer = self._buffer
        buffer += data
        out = []
        start, end = 0, len(buffer)
        while (header := _body_start(buffer, start + 1, end)) is not None:
            length, pos = header
            if end - pos < length:
                break
            first = buffer[start]
            out.append((first >> 4, first & 0x0F, bytes(buffer[pos : pos + length])))
            start = pos + length
        del buffer[:start]
        return out


class MqttClient:
    """A minimal MQTT 3.1.1 client on a trio stream: QoS 0 only, clean session, no
    keep-alive (0: the broker never times us out)."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.reader = PacketReader()
        self._ids = itertools.count(1)

    @classmethod
    async def connect(cls, stack: AsyncExitStack, port: int, client_id: str) -> MqttClient:
        stream = await trio.open_tcp_stream(HOST, port)
        stack.push_async_callback(trio.aclose_forcefully, stream)
        c = cls(stream)
        body = _string("MQTT") + bytes([4, 0x02]) + (0).to_bytes(2, "big") + _string(client_id)
        await stream.send_all(_packet(CONNECT << 4, body))
        reply = next(body for kind, _, body in await c.expect(CONNACK) if kind == CONNACK)
        if reply[1] != 0:
            raise ConnectionError(f"MQTT broker refused the connection: return code {reply[1]}")
        return c

    async def expect(self, kind: int) -> list[tuple[int, int, bytes]]:
        """Read until a packet of type ``kind`` arrives; return the packets read."""
        packets: list[tuple[int, int, bytes]] = []
        while not any(p[0] == kind for p in packets):
            data = await self.stream.receive_some(READ_SIZE)
            if not data:
                raise ConnectionError("the MQTT broker closed the connection")
            packets += self.reader.feed(data)
        return packets

    async def subscribe(self, topics: list[str]) -> None:
        """Subscribe to ``topics`` (QoS 0) in one SUBSCRIBE; return once acknowledged."""
        packet_id = next(self._ids)
        body = packet_id.to_bytes(2, "big") + b"".join(_string(t) + b"\x00" for t in topics)
        await self.stream.send_all(_packet(SUBSCRIBE << 4 | 0x02, body))
        for kind, _, reply in await self.expect(SUBACK):
            if kind == SUBACK and any(code == 0x80 for code in reply[2:]):
                raise ConnectionError("the MQTT broker refused a subscription")


class MqttPublisher:
    def __init__(self, c: MqttClient, name: str) -> None:
        self.client = c
        self.name = name
        self._topic = _string(TOPIC)
        self._pack = msgpack.Packer(use_bin_type=True).pack

    async def publish(self, seqs: range) -> None:
        topic, pack, name = self._topic, self._pack, self.name
        data = b"".join(publish_packet(topic, pack(publish_wire(name, seq))) for seq in seqs)
        await self.client.stream.send_all(data)


class MqttSubscriber:
    def __init__(self, c: MqttClient) -> None:
        self.client = c

    async def receive(self) -> list[Sample]:
        unpackb = msgpack.unpackb
        while True:
            data = await self.client.stream.receive_some(READ_SIZE)
            if not data:
                raise ConnectionError("the MQTT broker closed the connection")
            t_ns = time.time_ns()
            out = []
            for kind, flags, body in self.client.reader.feed(data):
                if kind != PUBLISH:
                    continue
                skip = 2 + int.from_bytes(body[:2], "big") + (2 if flags & 0x06 else 0)
                event = unpackb(memoryview(body)[skip:], raw=False)  # topic, packet id
                out.append((event[3]["n"], t_ns - event[5]))
            if out:
                return out


class MqttSystem(System):
    """An MQTT broker process on a free loopback port. With ``filler`` it runs the
    workload as specified (1000 subscriptions installed); without it, only the
    subscribers' own subscriptions (the broker's best case, as in the anchors of `bench.table`)."""

    broker = ""

    def __init__(self, filler: bool = True) -> None:
        self.name = self.broker if filler else f"{self.broker}-bare"
        self.filler = filler
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self._ids = itertools.count(1)

    def command(self, workdir: Path) -> list[str]:
        """The command line that runs the broker on ``self.port`` (config written here)."""
        raise NotImplementedError

    def start(self, workdir: Path) -> None:
        def start_broker() -> subprocess.Popen[bytes]:
            self.port = free_base_port(1) + 1
            log = workdir / f"{self.name}-{self.port}.log"
            return start_process(self.command(workdir), (HOST, self.port), log)

        self.proc = retry_ports(start_broker)

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc)
            self.proc = None

    def _client_id(self, role: str) -> str:
        return f"bench-{role}-{os.getpid()}-{next(self._ids)}"

    async def publisher(self, stack: AsyncExitStack, node: int = 1) -> Publisher:
        client_id = self._client_id("pub")
        return MqttPublisher(await MqttClient.connect(stack, self.port, client_id), client_id)

    async def subscriber(self, stack: AsyncExitStack, node: int = 1) -> Subscriber:
        c = await MqttClient.connect(stack, self.port, self._client_id("sub"))
        await c.subscribe([TOPIC])
        return MqttSubscriber(c)

    async def install_filler(self, stack: AsyncExitStack, count: int, node: int = 1) -> None:
        if not self.filler:
            return
        c = await MqttClient.connect(stack, self.port, self._client_id("filler"))
        await c.subscribe([f"bench/filler/{k}" for k in range(count)])


class AmqttSystem(MqttSystem):
    broker = "amqtt"
    events_scale = AMQTT_EVENTS_SCALE

    def command(self, workdir: Path) -> list[str]:
        config = workdir / f"amqtt-{self.port}.yaml"
        config.write_text(
            "listeners:\n"
            "  default:\n"
            "    type: tcp\n"
            f"    bind: {HOST}:{self.port}\n"
            "plugins:\n"
            "  amqtt.plugins.authentication.AnonymousAuthPlugin:\n"
            "    allow_anonymous: true\n"
        )
        return [sys.executable, "-m", "amqtt.scripts.broker_script", "-c", str(config)]


class MosquittoSystem(MqttSystem):
    broker = "mosquitto"

    def __init__(self, executable: str) -> None:
        super().__init__()
        self.executable = executable

    def command(self, workdir: Path) -> list[str]:
        config = workdir / f"mosquitto-{self.port}.conf"
        config.write_text(
            f"listener {self.port} {HOST}\n"
            "allow_anonymous true\n"
            "persistence false\n"
            "set_tcp_nodelay true\n"  # as trio does for the other systems' sockets
            "max_queued_messages 0\n"  # no limit: QoS 0 messages are never dropped
            "max_queued_bytes 0\n"
            "log_dest stderr\n"
            "log_type error\n"
            "log_type warning\n"
        )
        return [self.executable, "-c", str(config)]


def _say(message: str) -> None:
    print(f"bench: {message}", file=sys.stderr, flush=True)


def ensure_amqtt() -> str | None:
    """None when amqtt is importable (installing it with pip if needed), else why not."""
    if importlib.util.find_spec("amqtt") is not None:
        return None
    _say(f"amqtt is missing: installing it with {sys.executable} -m pip install amqtt")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "amqtt"],
        capture_output=True,
        text=True,
        check=False,
    )
    importlib.invalidate_caches()
    if done.returncode != 0 or importlib.util.find_spec("amqtt") is None:
        detail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        return f"amqtt could not be installed with pip (exit {done.returncode}): {detail[0]}"
    return None


def find_mosquitto() -> tuple[str | None, str | None]:
    """(path of the mosquitto executable, None), installing the Debian package when
    missing and running as root; else (None, why not)."""
    path = shutil.which("mosquitto") or _existing("/usr/sbin/mosquitto")
    if path:
        return path, None
    if os.geteuid() != 0:
        return None, "mosquitto is not installed and installing it needs root (apt-get)"
    if shutil.which("apt-get") is None:
        return None, "mosquitto is not installed and there is no apt-get to install it"
    _say("mosquitto is missing: running apt-get update, then apt-get install -y mosquitto")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update"], ["apt-get", "install", "-y", "mosquitto"]):
        done = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
        if done.returncode != 0:
            detail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
            return None, f"{' '.join(cmd)} failed (exit {done.returncode}): {detail[0]}"
    path = shutil.which("mosquitto") or _existing("/usr/sbin/mosquitto")
    if path is None:
        return None, "apt-get installed mosquitto but no mosquitto executable was found"
    return path, None


def _existing(path: str) -> str | None:
    return path if Path(path).is_file() else None


def mqtt_systems(names: list[str]) -> tuple[list[System], dict[str, str]]:
    """The MQTT systems among ``names`` that can run here, and why the others are skipped."""
    systems: list[System] = []
    skipped: dict[str, str] = {}
    if "mosquitto" in names:
        path, why = find_mosquitto()
        if path is not None:
            systems.append(MosquittoSystem(path))
        else:
            skipped["mosquitto"] = why or "unavailable"
    if "amqtt" in names:
        why = ensure_amqtt()
        if why is None:
            systems += [AmqttSystem(), AmqttSystem(filler=False)]
        else:
            skipped["amqtt"] = why
    for name, why in skipped.items():
        _say(f"skipping {name}: {why}")
    return systems, skipped


def sections(measured: dict[str, dict[str, Any]], names: list[str]) -> dict[str, Any]:
    """One section per MQTT broker measured: the workload with 1000 subscriptions
    installed, the bare broker where measured (subscribers' subscriptions only), and
    our broker's ratios to each."""
    hop = measured.get("hop", {})
    out: dict[str, Any] = {}
    for name in names:
        if name not in measured:
            continue
        section = {
            "system": f"{name} broker, trio MQTT 3.1.1 client (QoS 0), topic equality",
            "with_1000_subscriptions": measured[name],
            f"hop_over_{name}": ratios(hop, measured[name]),
        }
        if f"{name}-bare" in measured:
            bare = measured[f"{name}-bare"]
            section["bare"] = bare
            section[f"hop_over_{name}_bare"] = ratios(hop, bare)
        out[name] = section
    return out


def run(names: list[str], settings: Settings, workdir: Path) -> dict[str, Any]:
    """Measure the MQTT brokers among ``names`` alternating with our broker."""
    systems, skipped = mqtt_systems(names)
    result: dict[str, Any] = {"skipped": skipped}
    if systems:
        measured = compare_fanout([HopSystem(), *systems], settings, workdir)
        result.update(fanout_sections(measured))
        result.update(sections(measured, names))
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer events and repetitions")
    parser.add_argument("--only", nargs="+", choices=["amqtt", "mosquitto"])
    args = parser.parse_args(argv)
    unwind_on_termination()  # stop what it started also when killed with SIGTERM
    settings = Settings.quick() if args.quick else Settings.full()
    with tempfile.TemporaryDirectory(prefix="bench-mqtt-") as tmp:
        result = run(args.only or ["amqtt", "mosquitto"], settings, Path(tmp))
    print(write_result("mqtt", result))


if __name__ == "__main__":
    main()
