"""The errors the client library raises (every client; `client` exports them)."""

from __future__ import annotations


class ClientError(Exception):
    """Base of the errors raised by the client library."""


class ConnectionLost(ClientError):
    """The connection to the broker has ended (lost, refused, or closed by this client)."""


class ClientClosed(ConnectionLost):
    """The connection ended because this client was closed (``aclose``, ``close``, or
    leaving its ``with`` block): the end a program asked for, not a loss."""


class BrokerError(ConnectionLost):
    """The broker sent Error (``code``, ``message``) and closed the connection; also what
    connecting raises when the broker refuses the Hello (a bad secret, say)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(code, message)
        self.code = code
        self.message = message

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class SubscriptionClosed(ClientError):
    """``next()`` on a subscription that was unsubscribed and has nothing queued."""


def fresh_copy(error: ConnectionLost) -> ConnectionLost:
    """A fresh instance of ``error``: one exception object must not be raised by several
    tasks at once (each raise rewrites its traceback)."""
    copy = type(error)(*error.args)
    copy.__cause__ = error.__cause__
    return copy


def lost(reason: str, cause: BaseException | None = None) -> ConnectionLost:
    """A ConnectionLost saying ``reason``, caused by ``cause``."""
    error = ConnectionLost(reason)
    error.__cause__ = cause
    return error
