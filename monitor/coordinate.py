"""A replay's client processes, started on their hosts and moved through the phases
together (`monitor.driver` is the other end): ready, clock offsets, one start
instant for all, publishing, drain, done. Every process started here is stopped here,
whatever happens: first by closing its input (which ends a driver anywhere, through any
launcher), then by signals to the process this host started. Client processes of this
host are forked from a fork server (`monitor.forkserver`), stopped after them.
"""

from __future__ import annotations

import contextlib
import json
import math
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio
from tqdm import tqdm

from broker.hosts import launch_command, python_on, runs_here
from monitor.driver import Plan
from monitor.forkserver import ForkedProcess, ForkServer, ForkServerError
from monitor.placement import ClientProcess
from topologies import Deployment

READY_TIMEOUT_S = 60.0
START_MARGIN_S = 0.5
PINGS = 5


class ClientProcessError(RuntimeError):
    """A client process failed: the message names it and its host."""


@dataclass
class Started:
    spec: ClientProcess
    process: trio.Process | ForkedProcess
    log: Path
    estimate_ns: int = 0
    offset_ns: int = 0
    rtt_ns: int = 0
    cpu_s: dict[str, float] = field(default_factory=dict)  # per phase
    published: int = 0
    delivered: int = 0
    counts: tuple[int, int] = (0, 0)
    done: bool = False  # it said so: its end is expected

    def describe(self) -> str:
        return f"client process {self.spec.name} on host {self.spec.host.label}"

    def record(self) -> dict[str, Any]:
        """The manifest's entry for this process."""
        return {
            "name": self.spec.name,
            "kind": "clients",
            "host": self.spec.host.label,
            "address": self.spec.host.address,
            "pid": self.process.pid,
            "publishers": list(self.spec.publishers),
            "subscribers": list(self.spec.subscribers),
            "clock_offset_ns": self.offset_ns,
            "clock_estimate_ns": self.estimate_ns,
            "clock_rtt_ns": self.rtt_ns,
            "cpu_s": self.cpu_s,
            "published": self.published,
            "delivered": self.delivered,
        }


@dataclass
class Schedule:
    warmup_s: float
    duration_s: float
    drain_s: float


class Coordinator:
    """Starts the client processes of one replay and drives them through its phases."""

    def __init__(
        self,
        processes: list[ClientProcess],
        deployment: Deployment,
        plan_for: Callable[[ClientProcess], Plan],
        log_dir: Path,
        quiet: bool,
    ) -> None:
        self.processes = processes
        self.deployment = deployment
        self.plan_for = plan_for
        self.log_dir = log_dir
        self.quiet = quiet
        self.started: dict[str, Started] = {}
        self.forks: ForkServer | None = None
        self._inbox_send, self._inbox = trio.open_memory_channel[tuple[str, Any]](math.inf)

    # --- starting and stopping ----------------------------------------------------------

    async def start(self, nursery: trio.Nursery) -> None:
        """Start every process, send it its plan, and wait until all are ready."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        for spec in self.processes:
            log = self.log_dir / f"{spec.name}.log"
            if self._forked(spec):
                process: trio.Process | ForkedProcess = await self._fork(spec, log)
            else:
                process = await self._open(spec, log)
            started = Started(spec, process, log)
            self.started[spec.name] = started
            nursery.start_soon(self._read, started)
            await self._send(started, json.loads(self.plan_for(spec).to_json()))
        await self._wait_all("ready", READY_TIMEOUT_S + 0.5 * len(self.processes))

    def _forked(self, spec: ClientProcess) -> bool:
        """Whether `spec` runs on this host with this interpreter: then it is forked
        from the fork server (`monitor.forkserver`), else started by its command."""
        here = runs_here(spec.host, self.deployment)
        return here and python_on(spec.host, self.deployment) == sys.executable

    async def _fork(self, spec: ClientProcess, log: Path) -> ForkedProcess:
        try:
            if self.forks is None:
                server_log = self.log_dir / "forkserver.log"
                self.forks = await ForkServer.start("monitor.driver", server_log)
            return await self.forks.spawn(log)
        except (ForkServerError, OSError) as exc:
            raise ClientProcessError(
                f"client process {spec.name} on host {spec.host.label}: {exc}"
            ) from None

    async def _open(self, spec: ClientProcess, log: Path) -> trio.Process:
        host = spec.host
        words = [python_on(host, self.deployment), "-m", "monitor.driver"]
        here = runs_here(host, self.deployment)
        cmd = words if here else launch_command(host, self.deployment, words)
        with log.open("ab") as stderr:
            try:
                return await trio.lowlevel.open_process(
                    cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr
                )
            except OSError as exc:
                raise ClientProcessError(
                    f"client process {spec.name} on host {host.label}: cannot run {cmd[0]!r}: {exc}"
                ) from None

    async def stop(self) -> None:
        """End every process started: close its input, then SIGTERM, then SIGKILL;
        then the fork server."""
        try:
            await self._stop_processes()
        finally:
            if self.forks is not None:
                await self.forks.stop()

    async def _stop_processes(self) -> None:
        with trio.CancelScope(shield=True):
            for started in self.started.values():
                with contextlib.suppress(trio.ClosedResourceError, trio.BrokenResourceError):
                    assert started.process.stdin is not None
                    await started.process.stdin.aclose()
            for sig, wait_s in ((None, 5.0), (signal.SIGTERM, 3.0), (signal.SIGKILL, 3.0)):
                running = [s.process for s in self.started.values() if s.process.poll() is None]
                if not running:
                    return
                for process in running:
                    if sig is not None:
                        with contextlib.suppress(ProcessLookupError):
                            process.send_signal(sig)
                with trio.move_on_after(wait_s):
                    for process in running:
                        await process.wait()

    # --- the phases ---------------------------------------------------------------------

    async def measure_offsets(self) -> None:
        """Each process's clock minus this one's, from the ping with the shortest round
        trip (its error is at most half that round trip); applied only where it exceeds
        that bound."""
        for started in self.started.values():
            best: tuple[int, int] | None = None
            for n in range(PINGS):
                t0 = time.time_ns()
                await self._send(started, {"ping": n})
                pong = await self._expect(started, "pong", 10.0)
                t1 = time.time_ns()
                rtt = t1 - t0
                if best is None or rtt < best[1]:
                    best = (int(pong["time_ns"]) - (t0 + t1) // 2, rtt)
            assert best is not None
            started.estimate_ns, started.rtt_ns = best
            # An estimate within its own error bound (half the round trip) is no evidence
            # of another clock: processes of one machine share its clock exactly.
            started.offset_ns = started.estimate_ns if abs(best[0]) > best[1] // 2 else 0

    async def go(self) -> int:
        """Tell every process the common start instant (this host's clock); return it."""
        offsets: dict[str, int] = {}
        for started in self.started.values():
            offsets[started.spec.name] = started.offset_ns
            for client_name in started.spec.clients:
                offsets[client_name] = started.offset_ns
        start_ns = time.time_ns() + int((START_MARGIN_S + 0.01 * len(self.started)) * 1e9)
        for started in self.started.values():
            await self._send(started, {"go": start_ns, "offsets": offsets})
        return start_ns

    async def run_phases(self, schedule: Schedule) -> None:
        """Wait until every process has published (a progress line meanwhile), then
        drain them all and wait until they are done."""
        total = schedule.warmup_s + schedule.duration_s
        with tqdm(total=round(total), unit="s", disable=self.quiet, file=sys.stderr) as bar:
            begun = trio.current_time()
            deadline = begun + total + 30.0 + 0.1 * len(self.started)
            waiting = set(self.started)
            while waiting:
                with trio.move_on_at(min(deadline, trio.current_time() + 1.0)):
                    name, message = await self._next()
                    self._note(name, message, "published", waiting)
                if trio.current_time() >= deadline:
                    raise ClientProcessError(
                        f"{self._names(waiting)} did not finish publishing in time"
                    )
                second = min(round(total), int(trio.current_time() - begun))
                if second > bar.n:  # one line a second, however many processes report
                    published = sum(s.counts[0] for s in self.started.values())
                    delivered = sum(s.counts[1] for s in self.started.values())
                    bar.set_postfix_str(
                        f"published {published}, delivered {delivered}", refresh=False
                    )
                    bar.update(second - bar.n)
        for started in self.started.values():
            await self._send(started, {"drain": True})
        await self._wait_all("done", max(1.0, schedule.drain_s) + 30.0)

    # --- messages -----------------------------------------------------------------------

    async def _read(self, started: Started) -> None:
        """Lines from one process into the shared inbox; None at its end."""
        stdout = started.process.stdout
        assert stdout is not None
        buffer = b""
        try:
            while True:
                data = await stdout.receive_some(65536)
                if not data:
                    break
                buffer += data
                while b"\n" in buffer:
                    line, _, buffer = buffer.partition(b"\n")
                    with contextlib.suppress(ValueError):
                        self._inbox_send.send_nowait((started.spec.name, json.loads(line)))
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            pass
        self._inbox_send.send_nowait((started.spec.name, None))

    async def _send(self, started: Started, message: dict[str, Any]) -> None:
        stdin = started.process.stdin
        assert stdin is not None
        try:
            await stdin.send_all((json.dumps(message) + "\n").encode())
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            raise await self._ended(started) from None

    async def _next(self) -> tuple[str, dict[str, Any]]:
        """The next message of any process; a process that ends before it said it was
        done is an error."""
        while True:
            name, message = await self._inbox.receive()
            if message is not None:
                return name, message
            started = self.started[name]
            if not started.done:
                raise await self._ended(started)

    async def _ended(self, started: Started) -> ClientProcessError:
        with trio.move_on_after(2.0):
            await started.process.wait()
        code = started.process.poll()
        tail = started.log.read_text(errors="replace").strip().splitlines()[-3:]
        said = f"; its log ends: {' | '.join(tail)}" if tail else ""
        return ClientProcessError(
            f"{started.describe()} ended unexpectedly (exit code {code}, log {started.log}){said}"
        )

    def _note(self, name: str, message: dict[str, Any], wanted: str, waiting: set[str]) -> None:
        started = self.started[name]
        if "count" in message:
            started.counts = tuple(message["count"])
        if "published" in message:
            started.published = int(message["published"])
            started.cpu_s.update(message["cpu_s"])
        if "done" in message:
            started.done = True
            started.delivered = int(message["done"]["delivered"])
            started.cpu_s["drain"] = float(message["done"]["cpu_s_drain"])
        if wanted in message:
            waiting.discard(name)

    async def _expect(self, started: Started, key: str, timeout: float) -> dict[str, Any]:
        """The next message from `started` carrying `key` (others are noted)."""
        with trio.move_on_after(timeout):
            while True:
                name, message = await self._next()
                self._note(name, message, key, set())
                if name == started.spec.name and key in message:
                    return message
        raise ClientProcessError(f"{started.describe()} did not answer ({key}) in {timeout} s")

    async def _wait_all(self, key: str, timeout: float) -> None:
        waiting = set(self.started)
        with trio.move_on_after(timeout):
            while waiting:
                name, message = await self._next()
                self._note(name, message, key, waiting)
            return
        raise ClientProcessError(f"{self._names(waiting)} not {key} after {timeout:.0f} s")

    def _names(self, names: set[str]) -> str:
        return ", ".join(self.started[n].describe() for n in sorted(names))
