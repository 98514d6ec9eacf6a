"""A tiny blocking client that asks brokers for their counters (stats, readiness
checks, clock offsets, `hop stats --every`), no trio needed."""

from __future__ import annotations

import socket
import ssl
import time
from contextlib import suppress
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
    with StatsSession(host, port, timeout, name, secret=secret, ssl_context=ssl_context) as session:
        return session.ask()


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
    with StatsSession(
        host, port, timeout, "clock-probe", secret=secret, ssl_context=ssl_context
    ) as session:
        for _ in range(rounds):
            t_send = time.time_ns()
            t_broker = session.ask()["time_ns"]
            t_receive = time.time_ns()
            estimate = ClockOffset(t_broker - (t_send + t_receive) // 2, t_receive - t_send)
            if best is None or estimate.rtt_ns < best.rtt_ns:
                best = estimate
    assert best is not None, "rounds must be at least 1"
    return best


class StatsSession:
    """A handshaken connection to a broker that asks for its counters, as often as
    wanted: one connection for a series of requests, so a broker logs one link for a
    watch rather than one per request. Raises OSError when it cannot connect (ssl.SSLError
    is one) and ProtocolError when the broker refuses; after either, it is closed."""

    def __init__(
        self,
        host: str,
        port: int,
        timeout: float,
        name: str,
        *,
        secret: str | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self._conn = Connection("initiator")
        raw = socket.create_connection((host, port), timeout=timeout)
        try:
            self._sock = (
                raw if ssl_context is None else ssl_context.wrap_socket(raw, server_hostname=host)
            )
            self._sock.sendall(self._conn.send(Hello(PROTOCOL_VERSION, "client", name, secret)))
            _expect(self._sock, self._conn, Welcome)
        except BaseException:
            raw.close()
            raise

    def ask(self) -> dict[str, Any]:
        """The broker's counters now."""
        try:
            self._sock.sendall(self._conn.send(StatsRequest()))
            stats: dict[str, Any] = _expect(self._sock, self._conn, Stats).stats
        except BaseException:
            self._sock.close()
            raise
        return stats

    def close(self, *, say_bye: bool = True) -> None:
        """Say Bye (unless told not to, or the connection already failed) and close."""
        if say_bye and self._sock.fileno() != -1:
            with suppress(OSError):
                self._sock.sendall(self._conn.send(Bye("done")))
        self._sock.close()

    def __enter__(self) -> StatsSession:
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        self.close(say_bye=kind is None)


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
