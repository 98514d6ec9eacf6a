"""Many processes of one Python module, started by forking a process that imported it
once: `python -m monitor.forkserver MODULE FD GRACE_S` (the server) and `ForkServer`
(its owner's side, on trio).

A replay starts a client process (`monitor.driver`) per client on its host; started
the usual way, each imports trio, pyarrow, numpy and our packages again, some 0.3-0.4 s
of CPU, and a 15-broker replay's 24 client processes starting at once kept this host's
2 cores busy for seconds. A child forked from the server has all of it already.

The server only forks and reaps. It gets each child's standard input, output and
error as file descriptors over its Unix socket (``SCM_RIGHTS``), forks, and in the
child puts them on 0, 1 and 2 and calls ``MODULE.main()``: the child is then what
``python -m MODULE`` would be, with the pipes its owner made. It reports each child's
PID, and its exit code once reaped; its owner signals children by PID. Ctrl-C does not
stop the server (its children get it, as they would): the end of its socket does,
after its children ended (the owner ends them first; any still running GRACE_S later,
10 s by default, get SIGTERM, then SIGKILL).

Forking a process with threads keeps only the forking one: the server starts none,
and the libraries it imports that do (OpenBLAS's pool, pyarrow's jemalloc thread)
have their own fork handlers. Python's `random` reseeds itself in each child.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import trio

MESSAGE_SIZE = 4096
CHILDREN_GRACE_S = 10.0  # after the owner's end, before the children left get SIGTERM


class ForkServerError(RuntimeError):
    """The fork server could not start a process: the message says why."""


# --- the server -------------------------------------------------------------------------


def serve(module_name: str, control_fd: int, grace_s: float = CHILDREN_GRACE_S) -> int:
    """Import `module_name`, then fork a child running its ``main()`` for each request
    on the socket `control_fd`, until the socket ends; then wait `grace_s` for the
    children left before signalling them."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    control = socket.socket(fileno=control_fd)
    module = importlib.import_module(module_name)
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # (the wake-up fd is what counts)
    children: set[int] = set()

    def tell(message: dict[str, Any]) -> None:
        with contextlib.suppress(OSError):  # the owner is gone: nobody to tell
            control.send(json.dumps(message).encode())

    def reap() -> None:
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            children.discard(pid)
            tell({"exit": [pid, os.waitstatus_to_exitcode(status)]})

    while True:
        ready, _, _ = select.select([control.fileno(), wake_read], [], [])
        if wake_read in ready:
            os.read(wake_read, 4096)
            reap()
        if control.fileno() not in ready:
            continue
        try:
            data, fds, _, _ = socket.recv_fds(control, MESSAGE_SIZE, 3)
        except OSError:
            data, fds = b"", []
        if not data:
            break
        if len(fds) != 3:
            for fd in fds:
                os.close(fd)
            tell({"error": f"a request needs 3 file descriptors, got {len(fds)}"})
            continue
        try:
            pid = os.fork()
        except OSError as exc:
            tell({"error": f"cannot fork: {exc}"})
        else:
            if pid == 0:
                control.close()
                os.close(wake_read)
                os.close(wake_write)
                _run_child(module, fds)  # never returns
            children.add(pid)
            tell({"pid": pid})
        finally:
            for fd in fds:
                os.close(fd)
    _end_children(children, reap, grace_s)
    return 0


def _run_child(module: ModuleType, fds: list[int]) -> None:
    """In a forked child: become ``python -m MODULE`` on the given standard streams."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for fd in fds:
            if fd > 2:
                os.close(fd)
        sys.argv = [module.__file__ or module.__name__]
        try:
            result = module.main()
            code = result if isinstance(result, int) else 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            if not isinstance(exc.code, int | None):
                print(exc.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


def _end_children(children: set[int], reap: Callable[[], None], grace_s: float) -> None:
    """Wait for the children left; SIGTERM, then SIGKILL, those that do not end."""
    for sig, wait_s in ((None, grace_s), (signal.SIGTERM, 3.0), (signal.SIGKILL, 3.0)):
        if sig is not None:
            for pid in children:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
        deadline = time.monotonic() + wait_s
        while children and time.monotonic() < deadline:
            reap()
            time.sleep(0.02)
        if not children:
            return


# --- its owner's side -------------------------------------------------------------------


class ForkedProcess:
    """A child of the fork server, with what a replay uses of `trio.Process`: its PID,
    standard input and output, its exit code once known, a signal, a wait."""

    def __init__(self, server: ForkServer, pid: int, stdin: int, stdout: int) -> None:
        self._server = server
        self.pid = pid
        self.stdin = trio.lowlevel.FdStream(stdin)
        self.stdout = trio.lowlevel.FdStream(stdout)

    @property
    def returncode(self) -> int | None:
        return self._server.exit_code(self.pid)

    def poll(self) -> int | None:
        """The exit code, None while it runs (as `trio.Process.poll`)."""
        self._server.collect()
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    async def wait(self) -> int | None:
        """Wait until it ended; its exit code (None if the server is gone: then this
        waits until the process is, by its PID)."""
        await self._server.wait_for(self.pid)
        return self.returncode


class ForkServer:
    """The owner's end of one fork server: start it, spawn children, stop it."""

    def __init__(
        self, module: str, process: trio.Process, control: socket.socket, log: Path, grace_s: float
    ) -> None:
        self.module = module
        self._grace_s = grace_s
        self.process = process
        self._control = control
        self._log = log
        self._codes: dict[int, int] = {}  # exit codes of the children reaped
        self._lock = trio.Lock()
        self._ended = False

    @classmethod
    async def start(cls, module: str, log: Path, grace_s: float = CHILDREN_GRACE_S) -> ForkServer:
        """Start a server for `module`, its standard error appended to `log`; at its end
        it gives the children left `grace_s` to end before it signals them."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        args = [module, str(theirs.fileno()), str(grace_s)]
        try:
            with log.open("ab") as stderr:
                process = await trio.lowlevel.open_process(
                    [sys.executable, "-m", "monitor.forkserver", *args],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=stderr,
                    pass_fds=(theirs.fileno(),),
                )
        finally:
            theirs.close()
        ours.setblocking(False)
        return cls(module, process, ours, log, grace_s)

    async def spawn(self, stderr: Path) -> ForkedProcess:
        """A new child, its standard error appended to `stderr`."""
        stdin_read, stdin_write = os.pipe()
        stdout_read, stdout_write = os.pipe()
        with stderr.open("ab") as log:
            fds = [stdin_read, stdout_write, log.fileno()]
            try:
                async with self._lock:
                    await trio.lowlevel.wait_writable(self._control)
                    socket.send_fds(self._control, [b"{}"], fds)
                    while True:
                        message = await self._receive()
                        if message is None:
                            raise ForkServerError(self._gone())
                        if "error" in message:
                            raise ForkServerError(f"fork server: {message['error']}")
                        if "pid" in message:
                            break
            except BaseException:
                os.close(stdin_write)
                os.close(stdout_read)
                raise
            finally:
                os.close(stdin_read)
                os.close(stdout_write)
        return ForkedProcess(self, int(message["pid"]), stdin_write, stdout_read)

    def exit_code(self, pid: int) -> int | None:
        return self._codes.get(pid)

    def collect(self) -> None:
        """Take in the exit reports the server has sent, without waiting."""
        while not self._ended:
            try:
                data = self._control.recv(MESSAGE_SIZE)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            self._take(data)

    async def wait_for(self, pid: int) -> None:
        """Until the child `pid` has ended."""
        while self._codes.get(pid) is None and not self._ended:
            async with self._lock:
                if self._codes.get(pid) is None:
                    await self._receive()
        while self._codes.get(pid) is None and _alive(pid):  # the server is gone
            await trio.sleep(0.05)

    async def stop(self) -> None:
        """End the server (after its children: end them first) and wait for it; kill it
        if it has not ended in time (it waits its grace and signals its children)."""
        with trio.CancelScope(shield=True):
            self._control.close()
            self._ended = True
            with trio.move_on_after(self._grace_s + 10.0):
                await self.process.wait()
                return
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
            await self.process.wait()

    async def _receive(self) -> dict[str, Any] | None:
        """The server's next message (exit reports are noted); None once it is gone."""
        while not self._ended:
            await trio.lowlevel.wait_readable(self._control)
            try:
                data = self._control.recv(MESSAGE_SIZE)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            return self._take(data)
        return None

    def _take(self, data: bytes) -> dict[str, Any] | None:
        if not data:
            self._ended = True
            return None
        message: dict[str, Any] = json.loads(data)
        if "exit" in message:
            pid, code = message["exit"]
            self._codes[int(pid)] = int(code)
        return message

    def _gone(self) -> str:
        tail = self._log.read_text(errors="replace").strip().splitlines()[-3:]
        said = f"; its log ends: {' | '.join(tail)}" if tail else ""
        return f"the fork server for {self.module} ended (log {self._log}){said}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


if __name__ == "__main__":
    sys.exit(serve(sys.argv[1], int(sys.argv[2]), float(sys.argv[3])))
