"""Brokers on separate hosts, simulated with network namespaces (capability `netns`:
root and `ip`).

Three namespaces, one broker each, plugged by veth pairs into a bridge in a fourth
(switch) namespace, on private addresses 10.200.X.1-3; nothing is added to the host's
own namespace, and all traffic stays between the namespaces created here. Broker 1 is
the root, 2 and 3 its children; a publisher runs next to broker 2 and a subscriber next
to broker 3. Cutting broker 3's cable must not crash anything, and delivery must resume
once it is plugged back in.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.local_network import REPO
from tests import netns
from topologies import BrokerSpec, Topology
from topologies.generators import to_toml

pytestmark = [pytest.mark.integration, pytest.mark.needs("netns")]

PREFIX = f"hop{os.getpid() % 100000}"
SWITCH = f"{PREFIX}sw"
SUBNET = f"10.200.{os.getpid() % 250 + 1}"
BROKERS = {1: None, 2: 1, 3: 1}  # id -> parent
PORT = 7100


def ns(broker_id: int) -> str:
    return f"{PREFIX}b{broker_id}"


class Lines:
    """The stdout lines of a process, read by a thread, for waiting with a timeout."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.queue: queue.Queue[str] = queue.Queue()
        assert proc.stdout is not None
        threading.Thread(target=self._read, args=(proc.stdout,), daemon=True).start()

    def _read(self, stream: object) -> None:
        for line in stream:  # type: ignore[attr-defined]
            self.queue.put(line.strip())

    def next(self, timeout: float) -> str | None:
        try:
            return self.queue.get(timeout=timeout)
        except queue.Empty:
            return None

    def wait_for(self, wanted: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            if self.next(left) == wanted:
                return True
        return False


class Hosts:
    """The namespaces, the switch between them, and the processes run inside them."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.procs: list[subprocess.Popen[str]] = []
        self.namespaces: list[str] = []

    def build(self) -> None:
        hosts = {ns(broker_id): f"{SUBNET}.{broker_id}" for broker_id in BROKERS}
        netns.build(SWITCH, hosts, self.namespaces)

    def cable(self, broker_id: int, up: bool) -> None:
        """Plug broker's host into the switch, or pull the cable."""
        netns.ip("-n", SWITCH, "link", "set", f"p{broker_id}", "up" if up else "down")

    def run(self, broker_id: int, args: list[str], log: str) -> subprocess.Popen[str]:
        """A Python module run in broker's namespace (`ip netns exec` execs it: the PID
        is the Python process)."""
        cmd = ["ip", "netns", "exec", ns(broker_id), sys.executable, "-m", *args]
        with (self.workdir / f"{log}.log").open("w") as stderr:
            proc = subprocess.Popen(
                cmd, cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=stderr, text=True,
            )  # fmt: skip
        self.procs.append(proc)
        return proc

    def teardown(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
        netns.delete(self.namespaces)

    def logs(self) -> str:
        return "\n".join(f"{p.name}:\n{p.read_text()[-1500:]}" for p in self.workdir.glob("*.log"))


@pytest.fixture
def hosts(tmp_path: Path) -> Iterator[Hosts]:
    hosts = Hosts(tmp_path)
    try:
        hosts.build()
        yield hosts
    finally:
        hosts.teardown()


HEARTBEAT = ["--heartbeat", "0.5", "--heartbeat-timeout", "2"]


def topology_file(workdir: Path) -> Path:
    brokers = {b: BrokerSpec(b, parent, f"{SUBNET}.{b}", PORT + b) for b, parent in BROKERS.items()}
    topology = Topology(name="netns3", host=f"{SUBNET}.1", base_port=PORT, brokers=brokers)
    path = workdir / "netns3.toml"
    path.write_text(to_toml(topology))
    return path


def test_brokers_on_three_hosts_survive_a_pulled_cable(hosts: Hosts, tmp_path: Path) -> None:
    started = time.monotonic()
    file = str(topology_file(tmp_path))
    brokers = {
        b: hosts.run(b, ["broker.cli", "broker", file, "--id", str(b), *HEARTBEAT], f"broker-{b}")
        for b in BROKERS
    }
    sub = hosts.run(3, ["tests.netns_client", "sub", f"{SUBNET}.3", str(PORT + 3)], "sub")
    pub = hosts.run(2, ["tests.netns_client", "pub", f"{SUBNET}.2", str(PORT + 2)], "pub")
    received, sent = Lines(sub), Lines(pub)
    assert received.wait_for("ready", 40) and sent.wait_for("ready", 20), hosts.logs()

    def publish(seq: int) -> None:
        assert pub.stdin is not None
        pub.stdin.write(f"{seq}\n")
        pub.stdin.flush()
        assert sent.wait_for(f"sent {seq}", 10), hosts.logs()

    publish(1)
    assert received.next(15) == "1", hosts.logs()

    hosts.cable(3, up=False)
    publish(2)
    assert received.next(2) is None  # broker 3 is cut off
    # long enough for the heartbeats to declare the silent parent dead
    log3 = hosts.workdir / "broker-3.log"
    deadline = time.monotonic() + 10
    while "parent_lost" not in log3.read_text() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert "parent_lost" in log3.read_text(), hosts.logs()
    assert all(p.poll() is None for p in [*brokers.values(), sub, pub]), hosts.logs()

    hosts.cable(3, up=True)
    seq, got = 3, set()
    deadline = time.monotonic() + 30
    while not got & {str(s) for s in range(3, seq)} and time.monotonic() < deadline:
        publish(seq)
        seq += 1
        while (line := received.next(0.5)) is not None:
            got.add(line)
    assert got & {str(s) for s in range(3, seq)}, (got, hosts.logs())
    assert log3.read_text().count("parent_connected") >= 2, hosts.logs()  # it reconnected
    assert all(p.poll() is None for p in [*brokers.values(), sub, pub]), hosts.logs()
    assert time.monotonic() - started < 60
