"""Socket reads with one pass of trio's scheduler less, for the broker and the client.

trio checkpoints after every receive, so a task woken by data yields once more before
it can handle that data: on the way of every event at low load, in every broker hop
and at the subscriber. `receive_some` yields only after a read that did not wait
(fairness: a socket that always has data must not starve the other tasks), and, as
in trio, a cancellation never loses data already read. Together with the broker's
write-through (`broker.outgoing`) this brings a broker hop's added latency to the
trivial relay's and lowers its CPU per event at low rates; `python -m bench --only
chain wakeup` measures both (docs/performance.md).
"""

from __future__ import annotations

import os

import trio


def socket_fd(stream: trio.abc.Stream) -> int | None:
    """The file descriptor of a plain TCP stream; None for others (TLS, in memory)."""
    return stream.socket.fileno() if isinstance(stream, trio.SocketStream) else None


async def receive_some(
    stream: trio.abc.Stream, fd: int | None, max_bytes: int
) -> bytes | bytearray:
    """`stream.receive_some(max_bytes)`; `fd` is `socket_fd(stream)`. OSError (a reset
    connection) and trio.ClosedResourceError (the stream was closed meanwhile) end it
    as they end trio's."""
    if fd is None:
        return await stream.receive_some(max_bytes)
    await trio.lowlevel.checkpoint_if_cancelled()
    waited = False
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
