"""The fork server's owner on trio (`ForkServer`), for a replay's client processes:
each `python -m monitor.driver` is forked from a server that imported the driver once
(`broker.forkserver` says how the server works and why)."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
from pathlib import Path
from typing import Any

import trio

from broker.forkserver import (
    CHILDREN_GRACE_S,
    ForkServerError,
    ServerChild,
    ServerEnd,
    alive,
    control_pair,
    server_command,
)

__all__ = ["ForkServer", "ForkServerError", "ForkedProcess"]


class ForkedProcess(ServerChild["ForkServer"]):
    """A child of the fork server, with what a replay uses of `trio.Process`: its PID,
    standard input and output, its exit code once known, a signal, a wait."""

    def __init__(self, server: ForkServer, pid: int, stdin: int, stdout: int) -> None:
        super().__init__(server, pid)
        self.stdin = trio.lowlevel.FdStream(stdin)
        self.stdout = trio.lowlevel.FdStream(stdout)

    async def wait(self) -> int | None:
        """Wait until it ended; its exit code (None if the server is gone: then this
        waits until the process is, by its PID)."""
        await self._server.wait_for(self.pid)
        return self.returncode


class ForkServer(ServerEnd):
    """The owner's end of one fork server on trio: start it, spawn children, stop it."""

    def __init__(
        self, module: str, process: trio.Process, control: socket.socket, log: Path, grace_s: float
    ) -> None:
        super().__init__(module, control, log, grace_s)
        self.process = process
        self._lock = trio.Lock()

    @classmethod
    async def start(cls, module: str, log: Path, grace_s: float = CHILDREN_GRACE_S) -> ForkServer:
        """Start a server for `module`, its standard error appended to `log`; at its end
        it gives the children left `grace_s` to end before it signals them."""
        with control_pair() as (ours, theirs), log.open("ab") as stderr:
            process = await trio.lowlevel.open_process(
                server_command(module, theirs, grace_s),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                pass_fds=(theirs,),
            )
        return cls(module, process, ours, log, grace_s)

    async def spawn(self, stderr: Path) -> ForkedProcess:
        """A new child on pipes of its own, its standard error appended to `stderr`."""
        stdin_read, stdin_write = os.pipe()
        stdout_read, stdout_write = os.pipe()
        with stderr.open("ab") as log:
            fds = [stdin_read, stdout_write, log.fileno()]
            try:
                async with self._lock:
                    if not self._ended:
                        await trio.lowlevel.wait_writable(self._control)
                        self._request([], fds)
                    while (pid := self._answer(await self._receive())) is None:
                        pass
            except BaseException:
                os.close(stdin_write)
                os.close(stdout_read)
                raise
            finally:
                os.close(stdin_read)
                os.close(stdout_write)
        return ForkedProcess(self, pid, stdin_write, stdout_read)

    async def wait_for(self, pid: int) -> None:
        """Until the child `pid` has ended."""
        while self._codes.get(pid) is None and not self._ended:
            async with self._lock:
                if self._codes.get(pid) is None:
                    await self._receive()
        while self._codes.get(pid) is None and alive(pid):  # the server is gone
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
            if (data := self._recv()) is not None:
                return self._take(data)
        return None
