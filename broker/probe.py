"""A tiny blocking client for one request (stats, readiness checks), no trio needed."""

from __future__ import annotations

import socket
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


def fetch_stats(host: str, port: int, timeout: float = 5.0, name: str = "probe") -> dict[str, Any]:
    """Ask the broker at host:port for its counters.

    Raises OSError when it cannot connect and ProtocolError when the broker refuses.
    """
    conn = Connection("initiator")
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(conn.send(Hello(PROTOCOL_VERSION, "client", name)))
        _expect(sock, conn, Welcome)
        sock.sendall(conn.send(StatsRequest()))
        stats = _expect(sock, conn, Stats)
        sock.sendall(conn.send(Bye("done")))
        return stats.stats


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
