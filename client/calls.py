"""What the trio and asyncio clients share of their callers' side: the reconnecting
policy, the checks of a caller's filter and callbacks, and how the broker's answers
name the requests they answer."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

from broker.protocol import FlushAck, Message, Pong, SubAck, UnsubAck, Welcome
from routing import Filter, parse_filter


@dataclass(frozen=True, slots=True)
class Reconnect:
    """How a client reconnects after losing its broker (`client.aio`'s module doc)."""

    initial_s: float = 0.05  # first delay; doubles per failed attempt, jittered +-50 %
    max_s: float = 2.0  # cap of the delay
    wait_s: float = 10.0  # how long a call waits for the connection to come back
    heartbeat_s: float = 5.0  # ping the broker when it was quiet this long
    heartbeat_timeout_s: float = 15.0  # give the connection up after this much silence

    def __post_init__(self) -> None:
        if not 0 < self.initial_s <= self.max_s:
            raise ValueError("need 0 < initial_s <= max_s")
        if not 0 < self.heartbeat_s < self.heartbeat_timeout_s:
            raise ValueError("need 0 < heartbeat_s < heartbeat_timeout_s")


def reconnect_policy(reconnect: bool | Reconnect) -> Reconnect | None:
    """The policy a client's ``reconnect`` argument asks for (True: the default one)."""
    return Reconnect() if reconnect is True else (reconnect or None)


def check_callback(fn: Any, what: str) -> None:
    """TypeError unless ``fn`` is a plain callable: it is called in the client's I/O
    task, where an async function's coroutines would never run (and a handler's
    deliveries be lost)."""
    if not callable(fn):
        raise TypeError(f"{what} must be callable, got {type(fn).__name__}")
    if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__):
        hint = " (await next_batch() for async work)" if what == "handler" else ""
        raise TypeError(
            f"{what} must be a plain function, not an async one: it is called in the "
            f"client's I/O task and must not wait{hint}"
        )


def as_filter(filter: str | Filter) -> Filter:
    """A subscription's filter from the caller's text or ``routing.Filter``."""
    if isinstance(filter, Filter):
        return filter
    if isinstance(filter, str):
        return parse_filter(filter)
    raise TypeError(f"a filter is text or a routing.Filter, not {type(filter).__name__}")


# How an answer names the request it answers. Stats carries no id: the broker answers
# StatsRequests in order.
REPLY_KEY: dict[type[Message], Callable[[Any], int]] = {
    Welcome: lambda _: 0,
    SubAck: attrgetter("sub_id"),
    UnsubAck: attrgetter("sub_id"),
    FlushAck: attrgetter("token"),
    Pong: attrgetter("nonce"),
}
ReplyKey = tuple[type[Message], int]


def reply_key(message: Message) -> ReplyKey:
    """The key of the request that ``message`` (an answer in REPLY_KEY) answers."""
    return (type(message), REPLY_KEY[type(message)](message))
