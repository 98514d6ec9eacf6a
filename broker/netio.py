"""Socket I/O the broker and the client share: reads with one pass of trio's scheduler
less, and what a failed connection says.

trio checkpoints after every receive, so a task woken by data yields once more before
it can handle that data: on the way of every event at low load, in every broker hop
and at the subscriber. `receive_some` yields only after a read that did not wait
(fairness: a socket that always has data must not starve the other tasks), and, as
in trio, a cancellation never loses data already read. After a read that did not fill
its buffer it waits for data before reading again, as the client's reader does
(`client.socket_reader`): at low rates a read first would find nothing once per event
and raise, which costs CPU on the way back to the poll. Together with the broker's
write-through (`broker.outgoing`) this brings a broker hop's added latency to the
trivial relay's and lowers its CPU per event at low rates; `python -m bench --only
chain wakeup` measures both (docs/performance.md).
"""

from __future__ import annotations

import os
import socket

import trio


def host_port(host: str, port: int) -> str:
    """HOST:PORT as a user types it back: an IPv6 address in brackets ([::1]:7301),
    which `hop sub` and the others take; ::1:7301 would be ambiguous."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def socket_fd(stream: trio.abc.Stream) -> int | None:
    """The file descriptor of a plain TCP stream; None for others (TLS, in memory)."""
    return stream.socket.fileno() if isinstance(stream, trio.SocketStream) else None


async def receive_some(
    stream: trio.abc.Stream, fd: int | None, max_bytes: int, drained: bool = False
) -> bytes | bytearray:
    """`stream.receive_some(max_bytes)`; `fd` is `socket_fd(stream)`, ``drained`` whether
    the previous read returned fewer than its ``max_bytes`` (the socket then most likely
    has nothing: wait before reading). OSError (a reset connection) and
    trio.ClosedResourceError (the stream was closed meanwhile) end it as they end
    trio's."""
    if fd is None:
        return await stream.receive_some(max_bytes)
    waited = drained
    if drained:
        await trio.lowlevel.wait_readable(fd)
    else:
        await trio.lowlevel.checkpoint_if_cancelled()
    while True:
        try:
            data = os.read(fd, max_bytes)
        except BlockingIOError:  # (also when woken without data)
            await trio.lowlevel.wait_readable(fd)
            waited = True
            continue
        if not waited:
            await trio.lowlevel.cancel_shielded_checkpoint()
        return data


def connect_error(what: str, error: OSError) -> OSError:
    """What to raise, or log, for ``error`` from connecting to ``what`` ("the broker at
    HOST:PORT"): a message saying why (trio's says only "all attempts to connect ...
    failed", with a cause per address tried in a group), of the causes' class when
    they share one (ConnectionRefusedError, socket.gaierror), with their errno."""
    group = error.__cause__
    causes = [
        cause
        for cause in (group.exceptions if isinstance(group, BaseExceptionGroup) else ())
        if isinstance(cause, OSError)
    ] or [error]
    reasons = ", ".join(dict.fromkeys(connect_failure(cause) for cause in causes))
    kind = type(causes[0]) if len({type(cause) for cause in causes}) == 1 else OSError
    found = kind(f"cannot connect to {what}: {reasons}")
    found.errno = causes[0].errno
    return found


def connect_failure(error: OSError) -> str:
    """Why one connection attempt failed, in words."""
    if isinstance(error, socket.gaierror):
        return f"its host name cannot be resolved ({error.strerror})"
    if isinstance(error, ConnectionRefusedError):
        return "connection refused (is a hop broker listening there?)"
    return os.strerror(error.errno).lower() if error.errno else str(error)
