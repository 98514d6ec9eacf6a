"""Real broker networks on 127.0.0.1, cleaned up by PID: what the integration tests
and the benchmarks start (neither imports the other's modules for it)."""

from __future__ import annotations

import dataclasses
import os
import random
import socket
from collections.abc import Sequence
from pathlib import Path

from broker.probe import fetch_stats
from broker.process import BrokerProcesses
from broker.security import ClientCredentials
from topologies import Topology, load_case_study, load_topology
from topologies.generators import to_toml
from topologies.model import Routing

REPO = Path(__file__).resolve().parent.parent


def on_free_ports(study_file: Path, out: Path) -> Path:
    """A copy of the case study `study_file` at `out`, its brokers moved to ports free
    on 127.0.0.1 now."""
    study = load_case_study(study_file)
    base = free_base_port(len(study.topology.brokers))
    brokers = {b: dataclasses.replace(s, port=base + b) for b, s in study.topology.brokers.items()}
    topology = dataclasses.replace(study.topology, base_port=base, brokers=brokers)
    out.write_text(to_toml(dataclasses.replace(study, topology=topology)))
    return out


FREE_PORTS_ENV = "HOP_FREE_PORTS"
"""Where `free_base_port` looks, as LOW-HIGH: test runs and benchmarks sharing a host
(the two workers of `make test`, two people's runs) each set a range of their own, so
that a range one found free cannot be taken by another before its brokers listen."""


def free_base_port(count: int) -> int:
    """A base port such that base+1 .. base+count are free on 127.0.0.1 right now.

    Drawn from HOP_FREE_PORTS when it is set, else from 20000 up to the kernel's
    ephemeral range: below it, so the outgoing connections of this or other tests
    cannot take a broker's port in the seconds before it listens.
    """
    low, high = free_port_range()
    if high - low <= count:
        raise ValueError(f"{FREE_PORTS_ENV}={low}-{high} has no room for {count} ports")
    for _ in range(200):
        base = random.randrange(low, high - count)
        if all(_free(base + i) for i in range(1, count + 1)):
            return base
    raise RuntimeError(f"no {count} free ports found in {low}-{high}")


def free_port_range() -> tuple[int, int]:
    """(low, high) of the ports `free_base_port` draws from (HOP_FREE_PORTS or the default)."""
    text = os.environ.get(FREE_PORTS_ENV)
    if text is None:
        return 20000, min(60000, _ephemeral_low())
    try:
        low, high = (int(part) for part in text.split("-"))
    except ValueError:
        raise ValueError(
            f"{FREE_PORTS_ENV} must be LOW-HIGH (e.g. 20000-26000), not {text!r}"
        ) from None
    if not 1024 <= low < high <= 65535:
        raise ValueError(f"{FREE_PORTS_ENV}={text}: want 1024 <= LOW < HIGH <= 65535")
    return low, high


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


class Network:
    """The brokers of a topology as child processes, with a readiness check."""

    def __init__(
        self,
        topology: Topology,
        workdir: Path,
        extra_args: Sequence[str] = (),
    ) -> None:
        """`extra_args` go to every `hop broker` (e.g. `--heartbeat 1`). The brokers are
        forked from a fork server (`BrokerProcesses`), as `hop net` and a replay start
        theirs."""
        self.topology = topology
        self.file = workdir / f"{topology.name}.toml"
        self.file.write_text(to_toml(topology))
        self.logs = workdir / "logs"
        self.credentials = ClientCredentials.for_network(topology)
        self.procs = BrokerProcesses(self.file, topology, extra_args, self.credentials, forked=True)

    @classmethod
    def from_file(
        cls,
        name: str,
        workdir: Path,
        routing: Routing | None = None,
        extra_args: Sequence[str] = (),
    ) -> Network:
        """A shipped topology moved to free ports (and another strategy if given)."""
        topology = load_topology(REPO / "topologies" / f"{name}.toml")
        base = free_base_port(max(topology.brokers))
        brokers = {
            b: dataclasses.replace(spec, port=base + b) for b, spec in topology.brokers.items()
        }
        topology = dataclasses.replace(
            topology,
            base_port=base,
            brokers=brokers,
            routing=routing or topology.routing,
            name=f"{name}-{routing or topology.routing}",
        )
        return cls(topology, workdir, extra_args)

    def address(self, broker_id: int) -> tuple[str, int]:
        return self.topology.address(broker_id)

    def start(self) -> Network:
        self.procs.start(log_dir=self.logs)
        self.procs.wait_listening()
        self.wait_linked()
        return self

    def wait_linked(self, timeout: float = 20.0, brokers: list[int] | None = None) -> None:
        """Wait until every broker's links to its parent and children are up."""
        self.procs.wait_linked(timeout, brokers)

    def restart(self, broker_id: int) -> None:
        """Start a broker again (after `kill`) and wait until it answers."""
        self.procs.start_one(broker_id, self.logs)
        self.procs.wait_listening()

    def kill(self, broker_id: int) -> None:
        """SIGKILL one broker (kill -9) and reap it."""
        self.procs.kill(broker_id)

    def stats(self, broker_id: int) -> dict:
        creds = self.credentials
        return fetch_stats(
            *self.address(broker_id), secret=creds.secret, ssl_context=creds.ssl_context
        )

    def stop(self) -> dict[int, int]:
        return self.procs.stop()

    def log_text(self) -> str:
        return "\n".join(p.read_text() for p in sorted(self.logs.glob("*.log")))
