"""Running brokers as OS processes: one broker in this process, or a whole network
of child processes (`hop net`), each stopped by PID."""

from __future__ import annotations

import contextlib
import errno
import gc
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import IO, BinaryIO, Protocol

import trio

from broker import logs
from broker.forkserver import BlockingForkServer, ForkedChild, ForkServerError
from broker.hosts import launch_command, python_on, runs_here
from broker.netio import host_port
from broker.probe import fetch_stats
from broker.protocol import ProtocolError
from broker.security import ClientCredentials
from broker.server import Broker, BrokerConfig
from broker.trace.hop_trace import TRACE_WRITER
from topologies import Deployment, HostSpec, Topology


class StartupError(RuntimeError):
    """A broker could not start (for example, its port is taken)."""


STOPPING_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""What stops a broker, cleanly: Ctrl-C, SIGTERM, and a terminal's hangup (closing the
terminal of `hop net` or `hop broker`, an ssh session with a terminal dropping), which
would otherwise end it at once and lose what its trace had not yet written."""


def run_broker(
    topology: Topology,
    broker_id: int,
    config: BrokerConfig | None = None,
    stop_on_eof: bool = False,
    reread: Callable[[], Topology] | None = None,
) -> None:
    """Run one broker until SIGINT, SIGTERM or SIGHUP; StartupError if it cannot listen.

    On the signal the broker drains (`Broker.drain`: what it accepted reaches the
    connected peers, within `drain_timeout_s`) and then flushes its trace. With
    `stop_on_eof`, the end of its standard input stops it the same way: how a broker
    started on another host (through ssh, say) is stopped by the host that started it.
    `reread` reads its topology file again, for a child added to it (`Broker`).
    """
    broker = Broker(topology, broker_id, config, reread)
    # Out of file descriptors, trio's accept loop retries ten times a second, and logs
    # each failure with its traceback: here, warnings in the broker's log instead.
    logs.route_library_log("trio.serve_listeners", "accept_failed", broker=broker.name)
    # The start-up heap (trio, msgpack, pyarrow when tracing: ~10^5 objects) never
    # becomes garbage; freezing it keeps every full collection from walking it again.
    gc.freeze()

    problems: list[str] = []  # why it could not listen: raised once trio has returned,
    # as raised inside the nursery it would come out wrapped in an exception group

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            with trio.open_signal_receiver(*STOPPING_SIGNALS) as signals:
                if stop_on_eof:  # (only now: before, its SIGTERM would end the process)
                    threading.Thread(target=_sigterm_at_eof, daemon=True).start()
                try:
                    await nursery.start(broker.serve)
                except OSError as exc:
                    problems.append(_listen_problem(topology, broker_id, exc))
                    return
                async for _ in signals:
                    await broker.drain(broker.config.drain_timeout_s)
                    nursery.cancel_scope.cancel()
                    break

    trio.run(main)
    if problems:
        raise StartupError(problems[0])


def _sigterm_at_eof() -> None:
    with contextlib.suppress(OSError):
        while os.read(0, 65536):
            pass
    os.kill(os.getpid(), signal.SIGTERM)


def _listen_problem(topology: Topology, broker_id: int, exc: OSError) -> str:
    host, port = topology.address(broker_id)
    reason = "address already in use" if exc.errno == errno.EADDRINUSE else exc.strerror
    return f"broker {broker_id}: cannot listen on {host_port(host, port)}: {reason}"


def unwind_on_termination() -> None:
    """Make SIGTERM and SIGHUP (a terminal's hangup) unwind this process as Ctrl-C does
    (KeyboardInterrupt), so that the `finally` clauses and `with` blocks stopping the
    processes it started (brokers, relays, MQTT brokers) run. By default either signal
    ends Python at once: its children are left running (SIGTERM) or end at once too,
    their traces not written (a hangup reaches the terminal's whole process group). For
    the main thread of a command that starts child processes. `interrupting_signal`
    tells afterwards which signal it was.

    A SIGINT the command inherited ignored (a background job of a shell without job
    control) is blocked instead: it still never reaches the command, and SIGINT's
    handler is Python's default, which `trio.run` replaces by its own, so SIGTERM has a
    handler to be handed to there (`_interrupt`). Left ignored, trio would install none,
    and SIGTERM would raise KeyboardInterrupt in the middle of trio's loop, abandoning
    its tasks' clean-up. Threads keep the mask they started with, and one that did not
    block SIGINT would take it: so this is done only while the process has no other
    thread (numpy and pyarrow start some when imported: call this first). Otherwise
    SIGINT stays ignored, and SIGTERM raises at once (`_interrupt`)."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN and _one_thread():
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGHUP, _interrupt)


def _one_thread() -> bool:
    """Whether this process runs a single thread, native ones counted (Linux lists them
    all in /proc; elsewhere only Python's are seen)."""
    try:
        return len(os.listdir("/proc/self/task")) == 1
    except OSError:
        return threading.active_count() == 1


_interrupted_by: signal.Signals | None = None


def interrupting_signal() -> signal.Signals:
    """The signal behind the KeyboardInterrupt being handled: SIGTERM or SIGHUP once
    the handler of `unwind_on_termination` ran, else SIGINT (Ctrl-C)."""
    return _interrupted_by or signal.SIGINT


def _interrupt(signum: int, frame: FrameType | None) -> None:
    """SIGTERM's and SIGHUP's handler: do what SIGINT's handler does now.

    Raising KeyboardInterrupt here would raise it wherever the main thread happens to
    be, in the middle of trio's own code too (its wait for I/O, say): trio then
    abandons the run, the `finally` clauses of its tasks (stopping client processes
    and fork servers) never run, and at exit the garbage collector reports every
    abandoned coroutine as "Exception ignored". Inside `trio.run` SIGINT's handler is
    trio's, which raises KeyboardInterrupt in the main task where that is safe;
    elsewhere it is Python's, which raises it at once. With SIGINT ignored (where
    `unwind_on_termination` could not block it instead), there is no handler to lend,
    and the signal raises KeyboardInterrupt at once all the same: better than leaving
    the children running.
    """
    global _interrupted_by
    _interrupted_by = signal.Signals(signum)
    handler = signal.getsignal(signal.SIGINT)
    if callable(handler):
        handler(signal.SIGINT, frame)  # (trio's handler is for SIGINT alone)
    else:
        raise KeyboardInterrupt(f"signal {signum}")


_CPUCLOCK_SCHED = 2
"""Linux's id for a CPU clock counting scheduled run time to the nanosecond."""


def process_cpu_s(pid: int) -> float:
    """CPU seconds process `pid` has used so far: user and system time of all its
    threads, ended ones included, to the nanosecond. OSError once it is reaped.

    It reads the process's POSIX CPU clock (the id `clock_getcpuclockid` makes,
    computed here as Linux defines it). /proc/PID/stat would count 10 ms ticks,
    too coarse for the CPU of a few hundred events."""
    return time.clock_gettime((~pid << 3) | _CPUCLOCK_SCHED)


def _end(proc: BrokerProcess, deadline: float) -> int:
    """Its exit code once it ended by `deadline`, else once SIGKILLed."""
    try:
        return proc.wait(max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


def port_accepts(host: str, port: int, timeout: float = 0.2) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


class BrokerProcess(Protocol):
    """What `BrokerProcesses` keeps of a broker's process: a `subprocess.Popen`, or a
    `ForkedChild` of its fork server."""

    pid: int

    @property
    def returncode(self) -> int | None: ...

    @property
    def stdin(self) -> IO[bytes] | None: ...

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...

    def send_signal(self, sig: int) -> None: ...

    def kill(self) -> None: ...


class BrokerProcesses:
    """Child processes running the brokers of a topology file, stopped by PID.

    `credentials` are for the readiness checks (default: those the topology names).
    With `forked`, the brokers that run here with this interpreter are forked from a
    fork server (`broker.forkserver`, its log `LOG_DIR/broker-forkserver.log`) that
    imported the broker and its trace writer once, instead of each broker starting an
    interpreter of its own, and a traced one another for its writer: what `hop net` and
    a replay do, whose 15 brokers starting at once kept 2 cores busy for seconds. Their
    `procs` are then `ForkedChild`s.
    """

    def __init__(
        self,
        topology_file: Path,
        topology: Topology,
        extra_args: Sequence[str] = (),
        credentials: ClientCredentials | None = None,
        deployment: Deployment | None = None,
        elsewhere: tuple[str, str] | None = None,
        forked: bool = False,
    ):
        """`deployment` says how to start brokers on other hosts (default: every broker
        here); `elsewhere` is (folder here, its path there): arguments under the folder
        are given with the other path to brokers on other hosts (a replay's RUN_DIR and
        its workdir there)."""
        self.topology_file = topology_file
        self.topology = topology
        self.extra_args = list(extra_args)
        self.credentials = credentials or ClientCredentials.for_network(topology)
        self.deployment = deployment or Deployment()
        self.elsewhere = elsewhere
        self.forked = forked
        self.procs: dict[int, BrokerProcess] = {}
        self.started_at: dict[int, float] = {}
        self.logs: dict[int, Path] = {}  # each broker's standard error, if it has a file
        self._server: BlockingForkServer | None = None

    def host_of(self, broker_id: int) -> HostSpec:
        return self.deployment.host(self.topology.address(broker_id)[0])

    def here(self, broker_id: int) -> bool:
        """Whether broker `broker_id` runs on this host (else through a launcher)."""
        return runs_here(self.host_of(broker_id), self.deployment)

    def start(self, broker_ids: Sequence[int] | None = None, log_dir: Path | None = None) -> None:
        for broker_id in broker_ids or sorted(self.topology.brokers):
            self.start_one(broker_id, log_dir)

    def start_one(self, broker_id: int, log_dir: Path | None = None) -> BrokerProcess:
        """Start one broker: here as a child process (or a child of the fork server),
        on another host through the deployment's launcher (with --stop-on-eof: closing
        its input stops it, whatever the launcher does with signals)."""
        host = self.host_of(broker_id)
        here = self.here(broker_id)
        args = [str(self.topology_file), "--id", str(broker_id), *self.extra_args]
        if not here:
            args = [self._there(arg) for arg in args] + ["--stop-on-eof"]
        python = python_on(host, self.deployment)
        words = [python, "-m", "broker.cli", "broker", *args]
        cmd = words if here else launch_command(host, self.deployment, words)
        stderr = None
        if log_dir is not None:
            log_dir.mkdir(parents=True, exist_ok=True)
            self.logs[broker_id] = log_dir / f"broker-{broker_id}.log"
            stderr = self.logs[broker_id].open("ab")
        proc: BrokerProcess
        try:
            if self.forked and here and python == sys.executable:
                proc = self._fork(["broker", *args], stderr, log_dir)
            else:
                proc = subprocess.Popen(
                    cmd, stdin=subprocess.DEVNULL if here else subprocess.PIPE, stderr=stderr
                )
        except OSError as exc:
            raise StartupError(
                f"broker {broker_id} on host {host.label}: cannot run {cmd[0]!r}: {exc}"
            ) from None
        except ForkServerError as exc:
            raise StartupError(f"broker {broker_id} on host {host.label}: {exc}") from None
        finally:
            if stderr is not None:
                stderr.close()
        self.procs[broker_id] = proc
        self.started_at[broker_id] = time.monotonic()
        return proc

    def _fork(self, argv: list[str], stderr: BinaryIO | None, log_dir: Path | None) -> ForkedChild:
        """A broker forked from the fork server (started on first use, its log in
        `log_dir`), on /dev/null and this process's output, its standard error `stderr`
        (None: this process's, as the server's without a `log_dir`)."""
        if self._server is None:
            log = None if log_dir is None else log_dir / "broker-forkserver.log"
            # Traced brokers fork their writers (`broker.trace.hop_trace`): the server
            # imports the writer (numpy, pyarrow) for them, only then.
            traced = "--trace-dir" in self.extra_args
            preload = [TRACE_WRITER] if traced else []
            self._server = BlockingForkServer.start("broker.cli", log, preload=preload)
        with open(os.devnull, "rb") as devnull:
            return self._server.spawn(
                argv, devnull.fileno(), 1, stderr.fileno() if stderr is not None else 2
            )

    def _there(self, arg: str) -> str:
        """An argument as a broker on another host must see it."""
        if self.elsewhere is None:
            return arg
        here, there = self.elsewhere
        if arg == here or arg.startswith(here.rstrip("/") + "/"):
            return there.rstrip("/") + arg[len(here.rstrip("/")) :]
        return arg

    def _said(self, broker_id: int) -> str:
        """ ": " and the last line a broker that ended said as a command (`hop broker:
        ...`, why it could not start) in its log, if it has one; else ""."""
        log = self.logs.get(broker_id)
        try:
            lines = log.read_text(errors="replace").splitlines() if log is not None else []
        except OSError:
            return ""
        said = [line for line in lines if line.startswith("hop broker: ")]
        return f": {said[-1]}" if said else ""

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
                    raise StartupError(
                        f"broker {broker_id} on host {self.host_of(broker_id).label} "
                        f"exited with code {proc.returncode}{self._said(broker_id)}"
                    )
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
                    raise StartupError(
                        f"broker {broker_id} exited with code {proc.returncode}"
                        f"{self._said(broker_id)}"
                    )
                if time.monotonic() > deadline:
                    problem = stats.get("parent_problem") if not parent_ok else None
                    raise StartupError(
                        f"broker {broker_id} did not link to its parent and children in "
                        f"{timeout} s" + (f" ({problem})" if problem else "")
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
        except (OSError, ProtocolError):
            return False
        if self.here(broker_id):
            return stats.get("pid") == pid
        # Started elsewhere, its pid is not ours to know: it must be younger than the
        # launch, so a broker left from before on that port does not count.
        return stats.get("uptime_s", 1e9) <= time.monotonic() - self.started_at[broker_id] + 1

    def server_gone(self) -> str | None:
        """Why the fork server of the brokers forked here ended, if it did: their exit
        codes can no longer be told (`stop` still stops them, by PID)."""
        if self._server is None:
            return None
        self._server.collect()
        return self._server.why_gone() if self._server.ended else None

    def failed(self) -> dict[int, int]:
        """Brokers that have exited, with their exit codes."""
        codes = {b: p.poll() for b, p in self.procs.items()}
        return {b: code for b, code in codes.items() if code is not None}

    def kill(self, broker_id: int, sig: int = signal.SIGKILL) -> None:
        proc = self.procs[broker_id]
        if proc.poll() is None:
            os.kill(proc.pid, sig)
        proc.wait()

    def stop(self, timeout: float = 5.0) -> dict[int, int]:
        """Stop every broker as on SIGTERM (those started elsewhere by closing their
        input, which reaches them through any launcher), SIGKILL what is left after
        `timeout`; exit codes. (ForkServerError, once all are stopped, if the fork
        server died under forked brokers: their exit codes are lost with it.)"""
        for proc in self.procs.values():
            if proc.stdin is not None:
                with contextlib.suppress(OSError):
                    proc.stdin.close()
            elif proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        codes = {}
        unknown = []
        for broker_id, proc in self.procs.items():
            try:
                codes[broker_id] = _end(proc, deadline)
            except ForkServerError as exc:  # its server died: stopped, its code unknown
                unknown.append(f"broker {broker_id}: {exc}")
        if self._server is not None:
            self._server.stop()
            self._server = None
        if unknown:
            raise ForkServerError("; ".join(unknown))
        return codes
