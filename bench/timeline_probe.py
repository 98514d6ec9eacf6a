"""When a process's event loop woke and when it read and wrote an event, for
`bench.latency_path`.

`install(out)` wraps the calls at the process's system-call boundary, whatever the
library above them: the event loop's poll (trio's epoll manager, asyncio's
`selectors.EpollSelector`) returning with something ready ("wake"), a socket read
returning data ("read": ``os.read``, ``socket.recv``, and ``socket.recv_into``, which
asyncio's buffered protocols read with) and a socket write's start and end ("write",
"written": ``os.write``, ``socket.send``). Reads and writes are noted
only for sizes an event's frame or packet can have (`EVENT_SIZES`), so subscriptions,
acknowledgements and pings stay out. Each note is one ``time.time_ns()`` (the clock
every process of the machine shares) appended to a list; at the process's exit the
lists are written to ``out`` as JSON. Beside the wakes and the writes' starts, the CPU
each ran on (``sched_getcpu``; "wake_cpu", "write_cpu", a number per note, in the
same order): whether a process woke on the CPU of the process that woke it, or on an
idle one, changes what the wake-up costs (docs/performance.md).

``python -m bench.timeline_probe OUT MODULE [ARG ...]`` installs the probe and runs
MODULE as ``python -m MODULE ARG ...`` would (`bench.latency_path` runs ``hop broker``
so: ``broker.cli broker TOPOLOGY --id 1``).
"""

from __future__ import annotations

import atexit
import ctypes
import json
import os
import runpy
import select
import selectors
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

EVENT_SIZES = range(100, 401)
"""The byte counts of a read or write that carries one event of `bench.client_api`
(150-byte frames and packets, a Deliver a few bytes more)."""

KINDS = ("wake", "read", "write", "written")
CPU_KINDS = ("wake_cpu", "write_cpu")
"""The CPU of each "wake" and "write" note, in the order of those notes."""


def install(out: Path) -> dict[str, list[int]]:
    """Note this process's wakes, reads and writes from now on (the module doc); write
    them to ``out`` at exit. Returns the lists being filled."""
    notes: dict[str, list[int]] = {kind: [] for kind in (*KINDS, *CPU_KINDS)}
    now = time.time_ns
    cpu = ctypes.CDLL(None, use_errno=True).sched_getcpu
    woke, read, write, written = (notes[kind].append for kind in KINDS)
    woke_on, wrote_on = (notes[kind].append for kind in CPU_KINDS)

    def reading(call: Callable[..., Any], size: Callable[[Any], int] = len) -> Callable[..., Any]:
        """``call`` noting its reads of an event's size; ``size`` of what it returns
        is the bytes read (``recv_into`` returns the count itself)."""

        def probed(*args: Any) -> Any:
            data = call(*args)
            if size(data) in EVENT_SIZES:
                read(now())
            return data

        return probed

    def writing(call: Callable[..., Any]) -> Callable[..., Any]:
        def probed(*args: Any) -> Any:  # (fd or socket, data, ...)
            start = now()
            sent = call(*args)
            if len(args[1]) in EVENT_SIZES:
                write(start)
                written(now())
                wrote_on(cpu())
            return sent

        return probed

    epoll = select.epoll

    class ProbedEpoll:
        """``select.epoll``, noting each poll that returns something ready."""

        def __init__(self, *args: Any) -> None:
            self._epoll = epoll(*args)

        def __getattr__(self, name: str) -> Any:
            return getattr(self._epoll, name)

        def poll(self, *args: Any, **kwargs: Any) -> list[tuple[int, int]]:
            ready = self._epoll.poll(*args, **kwargs)
            if ready:
                woke(now())
                woke_on(cpu())
            return ready

    os.read = reading(os.read)
    os.write = writing(os.write)
    socket.socket.recv = reading(socket.socket.recv)  # type: ignore[method-assign]
    socket.socket.recv_into = reading(socket.socket.recv_into, int)  # type: ignore[method-assign]
    socket.socket.send = writing(socket.socket.send)  # type: ignore[method-assign]
    select.epoll = ProbedEpoll  # type: ignore[misc,assignment]  # (trio makes its epoll so)
    selectors.EpollSelector._selector_cls = ProbedEpoll  # type: ignore[attr-defined]
    atexit.register(lambda: out.write_text(json.dumps(notes)))
    return notes


def main(argv: list[str]) -> None:
    out, module, *args = argv
    install(Path(out))
    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
