"""Running brokers as OS processes: one broker in this process, or a whole network
of child processes (`hop net`), each stopped by PID."""

from __future__ import annotations

import errno
import gc
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import trio

from broker.probe import fetch_stats
from broker.protocol import ProtocolError
from broker.security import ClientCredentials
from broker.server import Broker, BrokerConfig
from topologies import Topology


class StartupError(RuntimeError):
    """A broker could not start (for example, its port is taken)."""


def run_broker(topology: Topology, broker_id: int, config: BrokerConfig | None = None) -> None:
    """Run one broker until SIGINT or SIGTERM; StartupError if it cannot listen.

    On the signal the broker drains (`Broker.drain`: what it accepted reaches the
    connected peers, within `drain_timeout_s`) and then flushes its trace.
    """
    broker = Broker(topology, broker_id, config)
    # The start-up heap (trio, msgpack, pyarrow when tracing: ~10^5 objects) never
    # becomes garbage; freezing it keeps every full collection from walking it again.
    gc.freeze()

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                try:
                    await nursery.start(broker.serve)
                except OSError as exc:
                    raise StartupError(_listen_problem(topology, broker_id, exc)) from None
                async for _ in signals:
                    await broker.drain(broker.config.drain_timeout_s)
                    nursery.cancel_scope.cancel()
                    break

    trio.run(main)


def _listen_problem(topology: Topology, broker_id: int, exc: OSError) -> str:
    host, port = topology.address(broker_id)
    reason = "address already in use" if exc.errno == errno.EADDRINUSE else exc.strerror
    return f"broker {broker_id}: cannot listen on {host}:{port}: {reason}"


def unwind_on_sigterm() -> None:
    """Make SIGTERM unwind this process as Ctrl-C does (KeyboardInterrupt), so that the
    `finally` clauses and `with` blocks stopping the processes it started (brokers,
    relays, MQTT brokers) run. By default SIGTERM ends Python at once and leaves them
    running. For the main thread of a command that starts child processes."""
    signal.signal(signal.SIGTERM, _interrupt)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def port_accepts(host: str, port: int, timeout: float = 0.2) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


class BrokerProcesses:
    """Child processes running the brokers of a topology file, stopped by PID.

    `credentials` are for the readiness checks (default: those the topology names).
    """

    def __init__(
        self,
        topology_file: Path,
        topology: Topology,
        extra_args: Sequence[str] = (),
        credentials: ClientCredentials | None = None,
    ):
        self.topology_file = topology_file
        self.topology = topology
        self.extra_args = list(extra_args)
        self.credentials = credentials or ClientCredentials.for_network(topology)
        self.procs: dict[int, subprocess.Popen[bytes]] = {}

    def start(self, broker_ids: Sequence[int] | None = None, log_dir: Path | None = None) -> None:
        for broker_id in broker_ids or sorted(self.topology.brokers):
            self.start_one(broker_id, log_dir)

    def start_one(self, broker_id: int, log_dir: Path | None = None) -> subprocess.Popen[bytes]:
        cmd = [sys.executable, "-m", "broker.cli", "broker", str(self.topology_file)]
        cmd += ["--id", str(broker_id), *self.extra_args]
        stderr = None
        if log_dir is not None:
            log_dir.mkdir(parents=True, exist_ok=True)
            stderr = (log_dir / f"broker-{broker_id}.log").open("ab")
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stderr=stderr)
        if stderr is not None:
            stderr.close()
        self.procs[broker_id] = proc
        return proc

    def wait_listening(self, timeout: float = 20.0) -> None:
        """Wait until every broker answers on its port; StartupError if one exits.

        The answer must come from the process started here (its pid in `stats`), not
        from whatever else may hold the port.
        """
        deadline = time.monotonic() + timeout
        waiting = dict(self.procs)
        while waiting:
            for broker_id, proc in list(waiting.items()):
                if proc.poll() is not None:
                    raise StartupError(f"broker {broker_id} exited with code {proc.returncode}")
                if self._answers(broker_id, proc.pid):
                    del waiting[broker_id]
            if time.monotonic() > deadline:
                raise StartupError(f"brokers {sorted(waiting)} did not start in {timeout} s")
            time.sleep(0.05)

    def wait_linked(self, timeout: float = 20.0, brokers: Sequence[int] | None = None) -> None:
        """Wait until each of `brokers` (default: all) has its parent link and a link to
        every child up, as both ends see it; StartupError naming a broker that does not.

        A child counts its parent as linked once the Welcome arrived, and the parent
        counts the child once it sent it: checking both ends is what makes an event
        published after this returns reach every broker it is routed to.
        """
        deadline = time.monotonic() + timeout
        for broker_id in brokers or sorted(self.topology.brokers):
            spec = self.topology.brokers[broker_id]
            children = len(self.topology.children(broker_id))
            while True:
                stats = self._stats(broker_id)
                parent_ok = spec.parent is None or bool(stats.get("parent_connected"))
                if parent_ok and stats.get("children_connected", 0) >= children:
                    break
                proc = self.procs.get(broker_id)
                if proc is not None and proc.poll() is not None:
                    raise StartupError(f"broker {broker_id} exited with code {proc.returncode}")
                if time.monotonic() > deadline:
                    raise StartupError(
                        f"broker {broker_id} did not link to its parent and children "
                        f"in {timeout} s"
                    )
                time.sleep(0.05)

    def _stats(self, broker_id: int) -> dict:
        """The broker's counters, or {} while it does not answer."""
        host, port = self.topology.address(broker_id)
        creds = self.credentials
        try:
            return fetch_stats(
                host, port, timeout=2.0, secret=creds.secret, ssl_context=creds.ssl_context
            )
        except (OSError, ProtocolError):
            return {}

    def _answers(self, broker_id: int, pid: int) -> bool:
        host, port = self.topology.address(broker_id)
        if not port_accepts(host, port):
            return False
        try:
            creds = self.credentials
            stats = fetch_stats(
                host, port, timeout=2.0, secret=creds.secret, ssl_context=creds.ssl_context
            )
            return stats["pid"] == pid
        except (OSError, ProtocolError, KeyError):
            return False

    def failed(self) -> dict[int, int]:
        """Brokers that have exited, with their exit codes."""
        return {b: p.returncode for b, p in self.procs.items() if p.poll() is not None}

    def kill(self, broker_id: int, sig: int = signal.SIGKILL) -> None:
        proc = self.procs[broker_id]
        if proc.poll() is None:
            os.kill(proc.pid, sig)
        proc.wait()

    def stop(self, timeout: float = 5.0) -> dict[int, int]:
        """SIGTERM every broker, SIGKILL what is left after `timeout`; exit codes."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for proc in self.procs.values():
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        return {b: p.returncode for b, p in self.procs.items()}
