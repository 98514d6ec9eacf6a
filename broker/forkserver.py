"""Many processes of one Python module, started by forking a process that imported it
once: the server (`python -m broker.forkserver MODULE FD GRACE_S [PRELOAD ...]`), the
state its owner keeps (`ServerEnd`), and a blocking owner (`BlockingForkServer`, whose
children look like `subprocess.Popen` objects: `ForkedChild`). `monitor.forkserver` is
the owner on trio.

Started the usual way, every broker or replay client is a new interpreter that
imports trio, msgpack, our packages (and the clients pyarrow and numpy) again: a
quarter to half a second of CPU each, and the 15 brokers and 24 client processes of a
replay, starting at once, keep a 2-core host busy for seconds. A child forked from the
server has all of it already.

The server only forks and reaps. Each request is a JSON object (``{"argv": [...]}``,
the child's arguments) with the child's standard input, output and error as file
descriptors (``SCM_RIGHTS``) on a Unix ``SOCK_SEQPACKET`` socket. The server forks,
and the child puts the descriptors on 0, 1 and 2, sets ``sys.argv`` and calls
``MODULE.main()``: it is then what ``python -m MODULE ARGS`` would be, with the
streams its owner chose. The server reports each child's PID, and its exit code once
reaped; its owner signals children by PID. Ctrl-C and SIGTERM do not stop the server
(its children get them, as they would): the end of its socket does, after its
children ended (the owner ends them first; any still running GRACE_S later get
SIGTERM, then SIGKILL). So an owner that dies leaves nothing running for long.

A child may fork a process of its own the same way (`fork_module`, for a module the
server preloaded): how a traced broker starts its trace writer.

Forking a process with threads keeps only the forking one: the server starts none,
a child forks only before it starts any, and the libraries they import that do
(OpenBLAS's pool, pyarrow's jemalloc thread) have their own fork handlers. Python's
`random` reseeds itself in each child.
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
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import IO, Any, Generic, TypeVar

from broker.procfs import process_stat

MESSAGE_SIZE = 65536  # a request's JSON (its argv) or a report
CHILDREN_GRACE_S = 10.0  # after the owner's end, before the children left get SIGTERM
ANSWER_TIMEOUT_S = 30.0  # for the server's answer to a request (it forks at once)
OWNERS_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}  # the children's, not its own


class ForkServerError(RuntimeError):
    """The fork server could not start a process: the message says why."""


# --- the server -------------------------------------------------------------------------


def serve(
    module_name: str,
    control_fd: int,
    grace_s: float = CHILDREN_GRACE_S,
    preload: Sequence[str] = (),
) -> int:
    """Import `module_name` (and the modules `preload`, for its children to use), then
    fork a child running its ``main()`` for each request on the socket `control_fd`,
    until the socket ends; then wait `grace_s` for the children left before signalling
    them."""
    # Blocked, not ignored: a child inherits the mask and unblocks once its handlers
    # are its own, so a signal sent the moment its PID is told waits for it. (An
    # ignored signal would be dropped in that window.)
    signal.pthread_sigmask(signal.SIG_BLOCK, OWNERS_SIGNALS)
    control = socket.socket(fileno=control_fd)
    module = importlib.import_module(module_name)
    for name in preload:
        importlib.import_module(name)
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
        try:
            argv = parse_request(data, fds)
        except ValueError as exc:
            for fd in fds:
                os.close(fd)
            tell({"error": str(exc)})
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
                _run_child(module, fds, argv)  # never returns
            children.add(pid)
            tell({"pid": pid})
        finally:
            for fd in fds:
                os.close(fd)
    _end_children(children, reap, grace_s)
    return 0


def parse_request(data: bytes, fds: list[int]) -> list[str]:
    """The child's arguments from a request; ValueError naming what is wrong with it."""
    if len(fds) != 3:
        raise ValueError(f"a request needs 3 file descriptors, got {len(fds)}")
    try:
        request = json.loads(data)
    except ValueError:
        raise ValueError(f"a request must be a JSON object, got {data[:80]!r}") from None
    argv = request.get("argv", []) if isinstance(request, dict) else None
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
        raise ValueError(f"a request's argv must be a list of strings, got {data[:80]!r}")
    return argv


_forked = False  # whether this process is a child of a fork server, or forked from one


def forked_from_server() -> bool:
    """Whether this process is a fork server's child: it has no threads of its own yet
    and has the server's modules imported, so it may fork children of its own
    (`fork_module`) instead of starting interpreters."""
    return _forked


def _run_child(module: ModuleType, fds: list[int], argv: list[str]) -> None:
    """In a forked child: become ``python -m MODULE ARGV`` on the given standard streams."""
    global _forked
    _forked = True
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for fd in fds:
            if fd > 2:
                os.close(fd)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, OWNERS_SIGNALS)  # (on its own streams)
        sys.argv = [module.__file__ or module.__name__, *argv]
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


def server_command(
    module: str, control_fd: int, grace_s: float, preload: Sequence[str] = ()
) -> list[str]:
    """The command starting a server for `module` on the socket `control_fd`."""
    args = [module, str(control_fd), str(grace_s), *preload]
    return [sys.executable, "-m", "broker.forkserver", *args]


@contextlib.contextmanager
def control_pair() -> Iterator[tuple[socket.socket, int]]:
    """The owner's socket and the server's descriptor, for starting a server with
    ``pass_fds``: the server's end is closed here once it started (or failed to); ours
    is closed too if the start failed, else left non-blocking."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        yield ours, theirs.fileno()
    except BaseException:
        ours.close()
        raise
    finally:
        theirs.close()
    ours.setblocking(False)


class ServerEnd:
    """What an owner knows of its server: the exit codes it reported, and whether it
    has ended. The control socket is non-blocking; the owners wait on it their way."""

    def __init__(
        self, module: str, control: socket.socket, log: Path | None, grace_s: float
    ) -> None:
        self.module = module
        self._control = control
        self._log = log
        self._grace_s = grace_s
        self._codes: dict[int, int] = {}  # exit codes of the children reaped
        self._ended = False

    def exit_code(self, pid: int) -> int | None:
        return self._codes.get(pid)

    @property
    def ended(self) -> bool:
        """Whether the server is gone (as last seen: `collect` looks again)."""
        return self._ended

    def collect(self) -> None:
        """Take in the exit reports the server has sent, without waiting."""
        while not self._ended and (data := self._recv()) is not None:
            self._take(data)

    def _request(self, argv: Sequence[str], fds: Sequence[int]) -> None:
        """Ask for a child with arguments `argv` on the descriptors `fds` (its standard
        input, output and error), once the socket takes it. A server gone is not told
        here but by the answer awaited next (`_answer`)."""
        with contextlib.suppress(OSError):
            socket.send_fds(self._control, [json.dumps({"argv": list(argv)}).encode()], fds)

    def _recv(self) -> bytes | None:
        """The server's next message if one is there (None if not; b"" at its end)."""
        try:
            return self._control.recv(MESSAGE_SIZE)
        except BlockingIOError:
            return None
        except OSError:
            return b""

    def _take(self, data: bytes) -> dict[str, Any] | None:
        """Note a message of the server (an exit report, or its end, as None)."""
        if not data:
            self._ended = True
            return None
        message: dict[str, Any] = json.loads(data)
        if "exit" in message:
            pid, code = message["exit"]
            self._codes[int(pid)] = int(code)
        return message

    def _answer(self, message: dict[str, Any] | None) -> int | None:
        """The PID in the server's answer to a request; None for another message;
        ForkServerError if it refused or is gone."""
        if message is None:
            raise ForkServerError(self.why_gone())
        if "error" in message:
            raise ForkServerError(f"fork server: {message['error']}")
        return int(message["pid"]) if "pid" in message else None

    def why_gone(self) -> str:
        """That the server ended, how if known, with the last lines of its log."""
        ended = f"the fork server for {self.module} ended{self._how_ended()}"
        if self._log is None:
            return f"{ended} (what it said, if anything, is above)"
        tail = self._log.read_text(errors="replace").strip().splitlines()[-3:]
        said = f"; its log ends: {' | '.join(tail)}" if tail else ""
        return f"{ended} (log {self._log}){said}"

    def _how_ended(self) -> str:
        """How the server process ended, where the owner can tell: ", killed by SIGKILL"."""
        return ""


class BlockingForkServer(ServerEnd):
    """An owner that blocks while it waits: for synchronous code (`BrokerProcesses`)."""

    def __init__(
        self,
        module: str,
        process: subprocess.Popen[bytes],
        control: socket.socket,
        log: Path | None,
        grace_s: float,
    ) -> None:
        super().__init__(module, control, log, grace_s)
        self.process = process

    def _how_ended(self) -> str:
        code = self.process.poll()
        if code is None:
            return ""
        return f", killed by {signal.Signals(-code).name}" if code < 0 else f" with code {code}"

    @classmethod
    def start(
        cls,
        module: str,
        log: Path | None,
        grace_s: float = CHILDREN_GRACE_S,
        preload: Sequence[str] = (),
    ) -> BlockingForkServer:
        """Start a server for `module` (importing the modules `preload` as well), its
        standard error appended to `log` (None: this process's); at its end it gives the
        children left `grace_s` to end before it signals them."""
        with control_pair() as (ours, theirs), contextlib.ExitStack() as files:
            stderr = None if log is None else files.enter_context(log.open("ab"))
            process = subprocess.Popen(
                server_command(module, theirs, grace_s, preload),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                pass_fds=(theirs,),
            )
        return cls(module, process, ours, log, grace_s)

    def spawn(self, argv: Sequence[str], stdin: int, stdout: int, stderr: int) -> ForkedChild:
        """A new child with arguments `argv` on these standard streams (the server gets
        copies of the descriptors; the caller keeps and closes its own)."""
        deadline = time.monotonic() + ANSWER_TIMEOUT_S
        if not self._ended:
            select.select([], [self._control], [], ANSWER_TIMEOUT_S)
            self._request(argv, [stdin, stdout, stderr])
        while True:
            try:
                message = self._next(deadline)
            except TimeoutError:
                raise ForkServerError(
                    f"the fork server for {self.module} did not answer in {ANSWER_TIMEOUT_S:.0f} s"
                ) from None
            pid = self._answer(message)
            if pid is not None:
                return ForkedChild(self, pid)

    def wait_for(self, pid: int, timeout: float | None) -> int | None:
        """The exit code of the child `pid` once it ended, None after `timeout` (or if
        the server is gone; then its end is waited for by PID)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._codes.get(pid) is None and not self._ended:
            if deadline is not None and time.monotonic() >= deadline:
                return None
            with contextlib.suppress(TimeoutError):
                self._next(deadline)
        while self._codes.get(pid) is None and alive(pid):  # the server is gone
            if deadline is not None and time.monotonic() >= deadline:
                return None
            time.sleep(0.05)
        return self._codes.get(pid)

    def stop(self) -> None:
        """End the server (after its children: end them first) and wait for it; kill it
        if it has not ended in time (it waits its grace and signals its children)."""
        self._control.close()
        self._ended = True
        try:
            self.process.wait(self._grace_s + 10.0)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def _next(self, deadline: float | None) -> dict[str, Any] | None:
        """The server's next message (noted); TimeoutError at `deadline`."""
        while not self._ended:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([self._control], [], [], left)
            if not ready:
                raise TimeoutError(f"the fork server for {self.module} did not answer")
            if (data := self._recv()) is not None:
                return self._take(data)
        return None


Server = TypeVar("Server", bound=ServerEnd)


class ServerChild(Generic[Server]):
    """A child of a fork server as its owner sees it: its PID, its exit code once the
    server reported it, signals sent by PID."""

    def __init__(self, server: Server, pid: int) -> None:
        self._server = server
        self.pid = pid

    @property
    def returncode(self) -> int | None:
        return self._server.exit_code(self.pid)

    def poll(self) -> int | None:
        """The exit code, None while it runs."""
        self._server.collect()
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)


class ForkedChild(ServerChild["BlockingForkServer"]):
    """A child of a `BlockingForkServer`, with what `BrokerProcesses` uses of
    `subprocess.Popen`: its PID, exit code, `poll`, `wait`, signals. Its standard
    input is the owner's to keep (``stdin`` is None, as for a Popen without a pipe)."""

    stdin = None

    def wait(self, timeout: float | None = None) -> int:
        """Its exit code once it ended; `subprocess.TimeoutExpired` after `timeout`."""
        code = self._server.wait_for(self.pid, timeout)
        if code is None:
            if timeout is None:  # the server is gone and the child with it, unreported
                raise ForkServerError(self._server.why_gone())
            raise subprocess.TimeoutExpired(f"forked child {self.pid}", timeout)
        return code

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


# --- a fork server's child forking a process of its own ---------------------------------


def fork_module(module: ModuleType, argv: Sequence[str]) -> PipedChild:
    """Fork this process into ``python -m MODULE ARGV`` on new pipes for its standard
    input and output (its standard error is this process's): for a fork server's child
    (`forked_from_server`), which has the module imported and no threads of its own."""
    stdin_read, stdin_write = os.pipe()
    stdout_read, stdout_write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(stdin_write)
        os.close(stdout_read)
        _run_child(module, [stdin_read, stdout_write, 2], list(argv))  # never returns
    os.close(stdin_read)
    os.close(stdout_write)
    return PipedChild(pid, stdin_write, stdout_read)


class PipedChild:
    """A child forked by `fork_module`, with what a trace recorder uses of a
    `subprocess.Popen` started with ``stdin=PIPE, stdout=PIPE``: its PID, the two pipes
    as files, its exit code, a wait with a timeout."""

    def __init__(self, pid: int, stdin: int, stdout: int) -> None:
        self.pid = pid
        self.stdin: IO[bytes] = os.fdopen(stdin, "wb")
        self.stdout: IO[bytes] = os.fdopen(stdout, "rb")
        self.returncode: int | None = None
        self._ended = os.pidfd_open(pid)  # readable once the child has ended

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
                os.close(self._ended)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Its exit code once it ended; `subprocess.TimeoutExpired` after `timeout`."""
        if self.returncode is None:
            ready, _, _ = select.select([self._ended], [], [], timeout)
            if not ready:
                raise subprocess.TimeoutExpired(f"forked child {self.pid}", timeout or 0.0)
        code = self.poll()
        assert code is not None  # (the pidfd is readable once the child has ended)
        return code


def alive(pid: int) -> bool:
    """Whether the process `pid` runs: it exists and is not a zombie (one not ours to
    reap, whose parent may never reap it)."""
    fields = process_stat(pid)
    return fields is not None and fields[0] != b"Z"


if __name__ == "__main__":
    # The server runs as `broker.forkserver`, not `__main__`, so that its children's
    # `forked_from_server` is the module they import.
    from broker import forkserver

    sys.exit(forkserver.serve(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4:]))
