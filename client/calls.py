"""What the trio and asyncio clients share of their callers' side: the reconnecting
policy, the checks of a caller's filter and callbacks, how the broker's answers name
the requests they answer, a subscription's state and the calls built on its
``next_delivery`` (`QueuedSubscription`), and the calls both clients make alike through
their own requests and answers (`ClientCalls`: ``unsubscribe``, ``flush``, ``ping``,
``stats``, resubscribing)."""

from __future__ import annotations

import contextlib
import inspect
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, Generic, Protocol, Self, TypeVar, cast

from broker.protocol import (
    Flush,
    FlushAck,
    Message,
    Ping,
    Pong,
    Stats,
    StatsRequest,
    SubAck,
    Subscribe,
    UnsubAck,
    Unsubscribe,
    Welcome,
)
from client.errors import ClientClosed, ClientError, ConnectionLost, SubscriptionClosed, fresh_copy
from client.events import Delivery
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


def reconnect_policy(reconnect: bool | Reconnect | None) -> Reconnect | None:
    """The policy a client's ``reconnect`` argument asks for (True: the default one);
    TypeError, before connecting, for anything but a bool, None or a ``Reconnect``."""
    if isinstance(reconnect, Reconnect):
        return reconnect
    if reconnect is None or isinstance(reconnect, bool):
        return Reconnect() if reconnect else None
    raise TypeError(
        f"reconnect must be True, False or a client.Reconnect, got {type(reconnect).__name__}"
    )


def check_port(port: object) -> None:
    """TypeError or ValueError, before connecting, for what is no TCP port (a port out
    of range would otherwise fail as a refused connection, or an OverflowError)."""
    if type(port) is not int:
        raise TypeError(f"port must be an int, got {type(port).__name__}")
    if not 0 < port < 65536:
        raise ValueError(f"port must be 1 to 65535, got {port}")


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


def check_connection_callbacks(
    on_disconnect: Callable[..., object] | None, on_reconnect: Callable[..., object] | None
) -> None:
    """`check_callback` of a client's ``on_disconnect`` and ``on_reconnect``, if given."""
    for fn, what in ((on_disconnect, "on_disconnect"), (on_reconnect, "on_reconnect")):
        if fn is not None:
            check_callback(fn, what)


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


class QueuedSubscription(ABC):
    """What the trio and asyncio clients' subscriptions share: their id and filter, their
    queue of deliveries and state, and the calls built on ``next_delivery``. Each client
    adds how a consumer waits for a delivery and how one arrives."""

    def __init__(self, sub_id: int, filter: Filter) -> None:
        self.id = sub_id
        self.filter = filter
        # The deliveries not yet taken (a deque rather than a trio memory channel: a
        # third of the cost per delivery).
        self._queue: deque[Delivery] = deque()
        self._active = True
        self._end: ConnectionLost | None = None  # why it ended; None: unsubscribed
        self._acked = False  # the broker acknowledged it once: resubscribe on reconnect
        self._handler: Callable[[Delivery], object] | None = None  # see `_hand_off`

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.id} {str(self.filter)!r}>"

    @property
    def active(self) -> bool:
        """True until unsubscribed or the connection ends."""
        return self._active

    @abstractmethod
    async def next_delivery(self) -> Delivery:
        """The next delivery, waiting for one. Raises ``SubscriptionClosed`` once
        unsubscribed and drained, ``ConnectionLost`` once the connection ended and
        drained."""

    async def next(self) -> dict[str, Any]:
        """The attributes of the next event (see ``next_delivery``)."""
        return (await self.next_delivery()).attributes

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> dict[str, Any]:
        try:
            return await self.next()
        except (SubscriptionClosed, ClientClosed):
            raise StopAsyncIteration from None

    def _handled(self) -> ClientError:
        return ClientError(f"subscription {self.id} hands its deliveries to its handler")

    def _ended(self) -> ClientError:
        if self._end is None:
            return SubscriptionClosed(f"subscription {self.id} is unsubscribed")
        return fresh_copy(self._end)


class Subscription(Protocol):
    """What `ClientCalls` needs of a client's subscription."""

    @property
    def id(self) -> int: ...

    @property
    def filter(self) -> Filter: ...

    @property
    def _client(self) -> object: ...

    @property
    def _acked(self) -> bool: ...

    def _close(self, error: ConnectionLost | None) -> None: ...


Sub = TypeVar("Sub", bound=Subscription)
Reply = TypeVar("Reply")  # a client's slot for one answer (a trio event, an asyncio future)


class ClientCalls(Generic[Sub, Reply]):
    """The calls the trio and asyncio clients make alike, by way of their own ways to
    send a message (``_send``), to make a slot for its answer (``_new_reply``), to fill
    it (``_set_reply``) and to wait on it (``_answer``)."""

    _tokens: Iterator[int]
    _subscriptions: dict[int, Sub]
    _losses: int  # connections lost, and how many of them `flush` reported
    _flushed_losses: int
    _policy: Reconnect | None
    _wait_s: float  # how long a call waits for the connection to come back
    _failure: ConnectionLost | None  # set once the client is ending
    _replies: dict[ReplyKey, Reply]  # the requests waiting for their answers
    _stats_replies: deque[Reply]  # answered in order: Stats names no request

    async def _send(self, message: Message, internal: bool = False) -> None:
        """Queue ``message`` on the connection; ``internal`` messages (handshake,
        resubscribing) belong to the current connection only."""
        raise NotImplementedError

    def _new_reply(self) -> Reply:
        raise NotImplementedError

    def _set_reply(self, reply: Reply, message: Message) -> None:
        raise NotImplementedError

    async def _answer(self, reply: Reply) -> Message:
        """The answer put in ``reply``, waiting for it; ``ConnectionLost`` if the
        connection ended first."""
        raise NotImplementedError

    async def _request(self, message: Message, key: ReplyKey, internal: bool = False) -> Message:
        """Send ``message`` and wait for the answer named by ``key``."""
        reply = self._replies[key] = self._new_reply()
        try:
            await self._send(message, internal)
            return await self._answer(reply)
        finally:
            if self._replies.get(key) is reply:
                del self._replies[key]

    def _answered(self, message: Message) -> None:
        """Hand ``message`` to the request waiting for it, if any."""
        reply = self._replies.get(reply_key(message))
        if reply is not None:
            self._set_reply(reply, message)

    def _stats_answered(self, message: Stats) -> None:
        """Hand ``message`` to the oldest ``stats`` call waiting, if any."""
        if self._stats_replies:
            self._set_reply(self._stats_replies.popleft(), message)

    async def stats(self) -> dict[str, Any]:
        """The broker's counters and gauges (nested dicts)."""
        reply = self._new_reply()
        self._stats_replies.append(reply)
        try:
            await self._send(StatsRequest())
        except BaseException:
            with contextlib.suppress(ValueError):  # not sent: no answer will come for it
                self._stats_replies.remove(reply)
            raise
        return cast(Stats, await self._answer(reply)).stats

    async def _resubscribe(self) -> None:
        """Send every acknowledged subscription again; wait for all their SubAcks.
        (Those not acknowledged yet are sent again by their ``subscribe`` call.)"""
        subs = [sub for sub in self._subscriptions.values() if sub._acked]
        replies: dict[ReplyKey, Reply] = {(SubAck, sub.id): self._new_reply() for sub in subs}
        self._replies.update(replies)
        try:
            for sub in subs:
                await self._send(Subscribe(sub.id, sub.filter.to_wire()), internal=True)
            for reply in replies.values():
                await self._answer(reply)
        finally:
            for key, reply in replies.items():
                if self._replies.get(key) is reply:
                    del self._replies[key]

    def _reconnecting(self) -> bool:
        """Whether a lost connection is to be opened again (not once closed)."""
        return self._policy is not None and self._failure is None

    def _error(self) -> ConnectionLost:
        """What a call on a client that is ending raises (a copy: each raise its own)."""
        return fresh_copy(self._failure) if self._failure else ClientClosed("the client is closed")

    async def _subscribe(self, sub: Sub) -> None:
        """Send ``sub`` and wait for its SubAck; when reconnecting, send it again on the
        next connection if this one breaks first (for at most ``wait_s``)."""
        deadline = time.monotonic() + self._wait_s
        while True:
            try:
                await self._request(Subscribe(sub.id, sub.filter.to_wire()), (SubAck, sub.id))
                return
            except ConnectionLost:
                if not self._reconnecting() or time.monotonic() > deadline:
                    raise

    async def unsubscribe(self, subscription: Sub) -> None:
        """Remove ``subscription`` and wait for the broker's acknowledgement. It gets
        nothing more from the moment of the call; its iterator ends once what it had
        already queued is consumed. Unsubscribing twice does nothing."""
        if subscription._client is not self:
            raise ValueError(f"{subscription!r} belongs to another client")
        if self._subscriptions.get(subscription.id) is not subscription:
            return
        self._drop(subscription)
        try:
            await self._request(Unsubscribe(subscription.id), (UnsubAck, subscription.id))
        except ConnectionLost:
            if not self._reconnecting():  # else the next connection will not carry it
                raise

    async def flush(self) -> None:
        """Wait until the broker has accepted everything this client sent before.

        When reconnecting: raises ``ConnectionLost`` if a connection was lost since the
        previous ``flush`` (what was published before may be lost)."""
        token = next(self._tokens)
        try:
            await self._request(Flush(token), (FlushAck, token))
        finally:
            losses, self._flushed_losses = self._flushed_losses, self._losses
        if losses != self._losses:
            raise ConnectionLost(
                "the connection to the broker was lost since the previous flush: "
                "events published before may be lost"
            )

    async def ping(self) -> float:
        """Round-trip time to the broker, in seconds."""
        nonce = next(self._tokens)
        start = time.perf_counter()
        await self._request(Ping(nonce), (Pong, nonce))
        return time.perf_counter() - start

    def _drop(self, sub: Sub) -> None:
        if self._subscriptions.pop(sub.id, None) is not None:
            sub._close(None)
