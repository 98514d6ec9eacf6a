"""A tiny blocking client for one request (stats, readiness checks, clock offsets),
no trio needed."""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from broker.protocol import (
    PROTOCOL_VERSION,
    Bye,
    Connection,
    Error,
    Hello,
    ProtocolError,
    Stats,
    StatsRequest,
    Welcome,
)


@dataclass(frozen=True)
class ClockOffset:
    """A broker's wall clock minus ours, estimated from the stats round trip with the
    smallest round-trip time (the estimate is off by at most half of ``rtt_ns``)."""

    offset_ns: int
    rtt_ns: int


def fetch_stats(
    host: str,
    port: int,
    timeout: float = 5.0,
    name: str = "probe",
    *,
    secret: str | None = None,
    ssl_context: ssl.SSLContext | None = None,
) -> dict[str, Any]:
    """Ask the broker at host:port for its counters.

    Raises OSError when it cannot connect (ssl.SSLError is one) and ProtocolError when
    the broker refuses.
    """
    with _session(host, port, timeout, name, secret, ssl_context) as ask:
        return ask()


def clock_offset(
    host: str,
    port: int,
    rounds: int = 8,
    timeout: float = 5.0,
    *,
    secret: str | None = None,
    ssl_context: ssl.SSLContext | None = None,
) -> ClockOffset:
    """NTP-style estimate of the broker's clock offset: over ``rounds`` stats requests
    on one connection, offset = t_broker - (t_send + t_receive) / 2 of the round with
    the smallest round-trip time (the broker stamps ``time_ns`` in its stats)."""
    best: ClockOffset | None = None
    with _session(host, port, timeout, "clock-probe", secret, ssl_context) as ask:
        for _ in range(rounds):
            t_send = time.time_ns()
            t_broker = ask()["time_ns"]
            t_receive = time.time_ns()
            estimate = ClockOffset(t_broker - (t_send + t_receive) // 2, t_receive - t_send)
            if best is None or estimate.rtt_ns < best.rtt_ns:
                best = estimate
    assert best is not None, "rounds must be at least 1"
    return best


@contextmanager
def _session(
    host: str,
    port: int,
    timeout: float,
    name: str,
    secret: str | None,
    ssl_context: ssl.SSLContext | None,
) -> Iterator[Any]:
    """A handshaken connection; yields a function that asks for one Stats."""
    conn = Connection("initiator")
    with socket.create_connection((host, port), timeout=timeout) as raw:
        sock = raw if ssl_context is None else ssl_context.wrap_socket(raw, server_hostname=host)
        with sock:
            sock.sendall(conn.send(Hello(PROTOCOL_VERSION, "client", name, secret)))
            _expect(sock, conn, Welcome)

            def ask() -> dict[str, Any]:
                sock.sendall(conn.send(StatsRequest()))
                return _expect(sock, conn, Stats).stats

            yield ask
            sock.sendall(conn.send(Bye("done")))


def _expect(sock: socket.socket, conn: Connection, kind: type) -> Any:
    while True:
        data = sock.recv(65536)
        if not data:
            raise ProtocolError("unexpected", "the broker closed the connection")
        for message in conn.receive_data(data):
            if isinstance(message, Error):
                raise ProtocolError(message.code, message.message)
            if isinstance(message, kind):
                return message
