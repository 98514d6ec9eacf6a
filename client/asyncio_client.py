"""The asyncio client: ``open_asyncio_client`` (or ``await AsyncioClient.connect``) gives
an ``AsyncioClient`` connected to one broker, for programs on asyncio's event loop.

It offers what the trio client (`client.aio`) offers, with the same semantics: the same
calls, errors, reconnecting policy (`client.Reconnect`) and callbacks, described in
`client.aio`'s module doc. It is built on the same sans-I/O pieces: the wire protocol's
`broker.protocol.Connection`, the event checks and frames of `client.events`.

How it uses asyncio: one ``asyncio.BufferedProtocol`` per connection, which reads
``RECEIVE_SIZE`` bytes at a time into a buffer of its own (as the trio client reads;
asyncio's default of 256 KiB builds that many more deliveries at once), decodes the
broker's frames and hands each delivery to its subscription (a deque and the futures
of waiting consumers) or to its handler, as it is decoded. Frames go out
through the transport: a publish alone in time (``WRITE_THROUGH_GAP_NS`` after the one
before) is written at once, closer ones are joined and written once per pass of the
event loop (``loop.call_soon``), so a publishing loop writes in batches. ``publish``
waits only while ``OUTGOING_FRAMES`` frames are unwritten or the transport's buffer is
above its high-water mark (backpressure from the broker); the first of those also
lets the loop run once, so a publishing loop never starves the program's other tasks.

Where asyncio differs from trio, the decisions:

* There is no nursery: the client is an object with ``aclose`` and an async context
  manager. A handler's or callback's exception ends the client (pending and later calls
  raise ``ConnectionLost`` caused by it) and is raised again by ``wait_closed``, by
  ``aclose``, or when the client's ``async with`` block ends without an exception of its
  own, whichever comes first; it is never lost, and never raised twice.
* Cancelling a call (``asyncio.timeout``, ``task.cancel()``) is as in trio: a cancelled
  ``subscribe`` may leave the subscription in force at the broker, what it delivers is
  ignored; a cancelled ``publish_many`` may have handed its first events over.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import ssl
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable, Mapping
from contextlib import asynccontextmanager
from types import TracebackType
from typing import Any, cast

from broker.liveness import overrun
from broker.netio import connect_error, host_port
from broker.protocol import (
    PROTOCOL_VERSION,
    Bye,
    Connection,
    Error,
    Hello,
    Message,
    Ping,
    Pong,
    ProtocolError,
    Publish,
    Stats,
    SubAck,
    Unsubscribe,
    Welcome,
    error_frame,
)
from broker.security import secret_from_env
from client.aio import CLOSE_TIMEOUT, OUTGOING_FRAMES, RECEIVE_SIZE, WRITE_THROUGH_GAP_NS
from client.calls import (
    ClientCalls,
    QueuedSubscription,
    Reconnect,
    ReplyKey,
    as_filter,
    check_callback,
    check_connection_callbacks,
    check_port,
    reconnect_policy,
)
from client.errors import (
    BrokerError,
    ClientClosed,
    ConnectionLost,
    fresh_copy,
    lost,
)
from client.events import (
    Delivery,
    checked_event,
    checked_events,
    delivery_of,
    publish_frame,
    publish_frames,
)
from routing import Filter

__all__ = ["AsyncioClient", "AsyncioSubscription", "open_asyncio_client"]


class AsyncioSubscription(QueuedSubscription):
    """A subscription of an ``AsyncioClient``: ``await sub.next()`` or ``async for event in
    sub`` give the attributes of each delivered event, as ``client.AsyncSubscription``
    does (iteration ends once unsubscribed or the client is closed, after what was
    queued; a lost connection raises ``ConnectionLost``). Its queue is unbounded: the
    application must consume what it subscribes to."""

    def __init__(self, client: AsyncioClient, sub_id: int, filter: Filter) -> None:
        super().__init__(sub_id, filter)
        self._client = client
        self._waiters: list[asyncio.Future[None]] = []  # consumers waiting for more

    async def next_delivery(self) -> Delivery:
        if not self._queue:
            await self._wait()
        return self._queue.popleft()

    async def next_batch(self) -> list[Delivery]:
        """Wait for the next delivery; return it with every other one already queued."""
        queue = self._queue
        if not queue:
            await self._wait()
        batch = list(queue)
        queue.clear()
        return batch

    async def _wait(self) -> None:
        """Wait until a delivery is queued; raise why none will come."""
        while not self._queue:
            if not self._active:
                raise self._ended()
            if self._handler is not None:
                raise self._handled()
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            finally:
                with contextlib.suppress(ValueError):  # (woken: already taken out)
                    self._waiters.remove(waiter)

    def _put(self, delivery: Delivery) -> None:
        if self._handler is not None:
            self._handler(delivery)
        elif self._active:
            self._queue.append(delivery)
            self._wake()

    def _hand_off(self, handler: Callable[[Delivery], object]) -> None:
        """From now on, give each delivery to ``handler`` as it is decoded; what is
        queued goes first."""
        while self._queue:
            handler(self._queue.popleft())
        self._handler = handler

    def _close(self, error: ConnectionLost | None) -> None:
        """Accept nothing more; ``error`` is why (None: unsubscribed)."""
        if self._active:
            self._active = False
            self._end = error
            self._handler = None
            self._wake()

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)


class _Link(asyncio.BufferedProtocol):
    """One connection to the broker: its transport and protocol state, and the frames
    waiting to be written in the event loop's next pass. It reads into a buffer of its
    own, ``RECEIVE_SIZE`` bytes at a time, as the trio client does (`client.aio`)."""

    def __init__(self, client: AsyncioClient) -> None:
        self.client = client
        self.conn = Connection("initiator", build_deliver=delivery_of)
        self.transport: asyncio.Transport | None = None
        self.pending: list[bytes] = []  # frames for the next write, in order
        self.write_soon = False  # a write of `pending` is scheduled
        self.paused = False  # the transport's buffer is above its high-water mark
        self.drained: list[asyncio.Future[None]] = []  # senders waiting for room
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._buffer = memoryview(bytearray(RECEIVE_SIZE))

    # --- asyncio.Protocol --------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._buffer

    def buffer_updated(self, nbytes: int) -> None:
        self.client._received(self, self._buffer[:nbytes])

    def eof_received(self) -> bool:
        self.client._ended(self, ConnectionLost("the broker closed the connection"))
        return False  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)
        self.paused = False
        self._wake_senders()
        if exc is None:
            error = ConnectionLost("the broker closed the connection")
        else:
            error = lost(f"the connection to the broker failed: {exc!r}", exc)
        self.client._ended(self, error)

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        self._wake_senders()

    # --- writing -----------------------------------------------------------------------

    @property
    def usable(self) -> bool:
        return self.transport is not None and not self.transport.is_closing()

    def room(self) -> bool:
        """Whether a frame may be added without waiting."""
        return not self.paused and len(self.pending) < OUTGOING_FRAMES

    def put(self, frame: bytes, through: bool = False) -> None:
        """Write ``frame`` after those pending: at once with ``through`` when none are
        pending, else in the loop's next pass."""
        if through and not self.pending:
            assert self.transport is not None
            self.transport.write(frame)
            return
        self.pending.append(frame)
        if not self.write_soon:
            self.write_soon = True
            asyncio.get_running_loop().call_soon(self.write_pending)

    def write_now(self, frame: bytes) -> None:
        """Write ``frame`` after those pending, all of them at once."""
        self.pending.append(frame)
        self.write_pending()

    def write_pending(self) -> None:
        self.write_soon = False
        pending = self.pending
        if pending and self.usable:
            assert self.transport is not None
            self.transport.write(pending[0] if len(pending) == 1 else b"".join(pending))
        pending.clear()

    async def wait_for_room(self) -> None:
        """Write what is pending, let the loop run once, then wait while the transport's
        buffer is above its high-water mark (or until the connection ends)."""
        self.write_pending()
        await asyncio.sleep(0)
        while self.paused and self.usable:
            waiter = asyncio.get_running_loop().create_future()
            self.drained.append(waiter)
            await waiter

    def _wake_senders(self) -> None:
        waiters, self.drained = self.drained, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def abort(self) -> None:
        """Close at once, dropping what is unwritten."""
        self.pending.clear()
        if self.transport is not None:
            self.transport.abort()


class AsyncioClient(ClientCalls[AsyncioSubscription, asyncio.Future[Message]]):
    """An asyncio client connected to one broker: get one from ``open_asyncio_client``
    or ``await AsyncioClient.connect(...)`` (then ``await client.aclose()``, or use it
    as an async context manager). Its calls are those of ``client.AsyncClient``."""

    def __init__(
        self,
        name: str,
        hello: Hello,
        open_link: Callable[[AsyncioClient], Awaitable[_Link]],
        reconnect: Reconnect | None = None,
        on_disconnect: Callable[[ConnectionLost], object] | None = None,
        on_reconnect: Callable[[], object] | None = None,
    ) -> None:
        """Not connected yet: ``connect`` makes one and opens its first connection.
        ``open_link(client)`` is a coroutine function opening a connection (`_Link`)."""
        self.name = name
        self.reconnects = 0  # connections opened again after a loss
        self._hello = hello
        self._open_link = open_link
        self._policy = reconnect
        self._wait_s = reconnect.wait_s if reconnect else 0.0
        self._on_disconnect = on_disconnect
        self._on_reconnect = on_reconnect
        self._link: _Link | None = None
        self._ready = asyncio.Event()  # calls may use the connection
        self._loss: ConnectionLost | None = None  # why the current connection ended
        self._welcomed = False
        self._opened = False  # the first handshake completed
        self._losses = 0  # connections lost, and how many of them `flush` reported
        self._flushed_losses = 0
        self._heard = time.monotonic()  # when data last came from the broker
        self._failure: ConnectionLost | None = None  # set once the client is ending
        self._down = False
        self._closed = asyncio.Event()
        self._callback_error: BaseException | None = None  # a handler's or callback's
        self._callback_error_raised = False
        self._tasks: set[asyncio.Task[None]] = set()  # reconnecting, heartbeat
        self._reconnector: asyncio.Task[None] | None = None
        self._replies: dict[ReplyKey, asyncio.Future[Message]] = {}
        self._stats_replies: deque[asyncio.Future[Message]] = deque()
        self._subscriptions: dict[int, AsyncioSubscription] = {}
        self._sub_ids = itertools.count(1)
        self._event_seq = 0
        self._tokens = itertools.count(1)
        self._last_publish_ns = 0

    @classmethod
    async def connect(
        cls,
        host: str,
        port: int,
        *,
        name: str,
        secret: str | None = None,
        timeout: float = 10.0,
        ssl_context: ssl.SSLContext | None = None,
        reconnect: bool | Reconnect = False,
        on_disconnect: Callable[[ConnectionLost], object] | None = None,
        on_reconnect: Callable[[], object] | None = None,
    ) -> AsyncioClient:
        """Connect to the broker at ``host``:``port`` as client ``name``, with the
        arguments and errors of ``client.open_client``."""
        check_port(port)
        check_connection_callbacks(on_disconnect, on_reconnect)
        if secret is None:
            secret = secret_from_env()
        hello = Hello(PROTOCOL_VERSION, "client", name, secret)

        async def open_link(client: AsyncioClient) -> _Link:
            return await _open_link(client, host, port, ssl_context)

        client = cls(
            name, hello, open_link, reconnect_policy(reconnect), on_disconnect, on_reconnect
        )
        connected = False
        try:
            async with asyncio.timeout(timeout):
                client._use(await open_link(client))
                connected = True
                await client._request(hello, (Welcome, 0), internal=True)
        except TimeoutError:
            client._fail(ConnectionLost("the handshake did not complete"))
            if connected:
                raise TimeoutError(
                    f"connected to {host_port(host, port)}, but no hop broker answered the "
                    f"handshake within {timeout} s (is that a hop broker's port?)"
                ) from None
            raise TimeoutError(
                f"no connection to the broker at {host_port(host, port)} within {timeout} s"
            ) from None
        except BaseException:
            client._fail(ConnectionLost("the handshake did not complete"))
            raise
        client._opened = True
        client._ready.set()
        if client._policy is not None:
            client._start(client._heartbeat(client._policy))
        return client

    async def __aenter__(self) -> AsyncioClient:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self._close()
        if kind is None:
            self._raise_callback_error()

    def __repr__(self) -> str:
        return f"<AsyncioClient {self.name!r} {'closed' if self._failure else 'open'}>"

    @property
    def connected(self) -> bool:
        """Whether calls go out at once: false once closed, and while reconnecting."""
        return self._failure is None and self._ready.is_set()

    # --- public API --------------------------------------------------------------------

    async def subscribe(
        self, filter: str | Filter, handler: Callable[[Delivery], object] | None = None
    ) -> AsyncioSubscription:
        """Subscribe to events matching ``filter``; return once the broker acknowledged
        it (in force everywhere in the network). ``handler(delivery)`` is called for
        each delivery as it is decoded instead of queuing it (gmqtt's ``on_message``);
        it must not block. See ``client.AsyncClient.subscribe``."""
        parsed = as_filter(filter)
        if handler is not None:
            check_callback(handler, "handler")
        sub = AsyncioSubscription(self, next(self._sub_ids), parsed)
        self._subscriptions[sub.id] = sub  # events may come before the SubAck
        try:
            await self._subscribe(sub)
            if handler is not None:
                sub._hand_off(handler)
        except BaseException:
            if self._subscriptions.get(sub.id) is sub and handler is not None and sub._acked:
                self._send_nowait(Unsubscribe(sub.id))  # (its UnsubAck is not awaited)
            self._drop(sub)
            raise
        return sub

    async def publish(self, attributes: Mapping[str, Any], *, event_id: str | None = None) -> str:
        """Publish an event; return its id (default ``"{name}:{seq}"``, seq from 1).
        Returns once the event is handed to the connection (see ``flush``); waits while
        the connection's unwritten frames are at their limit. An invalid event raises
        TypeError or ValueError before anything is sent."""
        event = checked_event(attributes)
        now = time.time_ns()
        if event_id is None:
            seq = self._event_seq + 1
            event_id = f"{self.name}:{seq}"
            frame = publish_frame(event_id, self.name, event, now)
            self._event_seq = seq  # (a rejected event uses no id)
        else:
            frame = publish_frame(event_id, self.name, event, now)
        alone = now - self._last_publish_ns >= WRITE_THROUGH_GAP_NS
        self._last_publish_ns = now
        link = self._link
        if self._ready.is_set() and self._failure is None and link is not None and link.room():
            link.put(link.conn.send_encoded(Publish, frame), alone)
            return event_id
        await self._send_frames([frame], alone)
        return event_id

    async def publish_many(self, events: Iterable[Mapping[str, Any]]) -> list[str]:
        """Publish ``events`` in order, as many ``publish`` calls would, every one checked
        before any is sent; return their ids. They share one publication time."""
        checked = checked_events(events)
        if not checked:
            return []
        now = time.time_ns()
        ids, frames = publish_frames(self.name, self._event_seq, checked, now)
        self._event_seq += len(ids)
        self._last_publish_ns = now
        await self._send_frames(frames)
        return ids

    async def wait_closed(self) -> None:
        """Wait until the client ends: return once it is closed (``aclose``, from another
        task); raise what ended it otherwise: a handler's or callback's exception, or the
        ``ConnectionLost`` of a connection lost for good."""
        await self._closed.wait()
        self._raise_callback_error()
        failure = self._failure
        if not isinstance(failure, ClientClosed | None):  # (after a callback's error: the
            error = fresh_copy(failure)  # ConnectionLost it caused, as later calls raise)
            raise error from error.__cause__

    async def aclose(self) -> None:
        """Close the connection: send Bye after everything queued, wait (at most
        ``CLOSE_TIMEOUT``) for the broker to hang up, then close the socket. Pending and
        later calls raise ``ConnectionLost``; subscriptions end. Idempotent. A handler's
        or callback's exception that ended the client is raised here if ``wait_closed``
        has not raised it (once, as the blocking client's ``close``)."""
        await self._close()
        self._raise_callback_error()

    async def _close(self) -> None:
        try:
            link = self._link
            if self._failure is None:
                self._failure = ClientClosed("the client is closed")
                if self._ready.is_set() and link is not None and link.usable:
                    link.write_now(link.conn.send(Bye("closing")))
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(CLOSE_TIMEOUT):
                            await asyncio.shield(link.closed)  # the broker hangs up
        finally:
            self._teardown()
        if self._link is not None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(CLOSE_TIMEOUT):
                    await asyncio.shield(self._link.closed)

    # --- sending -----------------------------------------------------------------------

    async def _usable_link(self, internal: bool, deadline: float) -> _Link:
        """The connection to send on, waiting for it when reconnecting (at most until
        ``deadline``, for calls; ``internal`` ones belong to the current one only)."""
        while True:
            if self._failure is not None:
                raise self._error()
            link = self._link
            if internal:
                if self._loss is not None or link is None or not link.usable:
                    raise ConnectionLost("the connection to the broker was lost")
                return link
            if self._ready.is_set() and link is not None and link.usable:
                return link
            if not self._reconnecting():
                raise self._error()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ConnectionLost(f"not reconnected to the broker in {self._wait_s} s")
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await self._ready.wait()

    async def _send(self, message: Message, internal: bool = False) -> None:
        """Encode ``message`` and write it after what is pending, waiting for the
        connection (reconnecting) or for room as a publish does."""
        deadline = time.monotonic() + self._wait_s
        while True:
            link = await self._usable_link(internal, deadline)
            if link.room():
                link.write_now(link.conn.send(message))
                return
            await link.wait_for_room()

    async def _send_frames(self, frames: list[bytes], through: bool = False) -> None:
        """Hand the Publish ``frames`` to the connection in order, waiting for room as
        they go; when reconnecting, those a lost connection did not take go to the
        next one. ``through``: a lone frame is written at once if nothing is pending."""
        deadline = time.monotonic() + self._wait_s
        done, count = 0, len(frames)
        while done < count:
            link = await self._usable_link(False, deadline)
            link.conn.send_encoded(Publish, frames[done])
            while done < count and link.room():
                link.put(frames[done], through and count == 1)
                done += 1
            if done < count:
                await link.wait_for_room()

    def _send_nowait(self, message: Message) -> None:
        """Write ``message`` if the connection is up, else drop it (Pong, a heartbeat's
        Ping, an Unsubscribe nobody waits for)."""
        link = self._link
        if self._failure is None and self._loss is None and link is not None and link.usable:
            link.write_now(link.conn.send(message))

    def _new_reply(self) -> asyncio.Future[Message]:
        return asyncio.get_running_loop().create_future()

    def _set_reply(self, reply: asyncio.Future[Message], message: Message) -> None:
        if not reply.done():
            reply.set_result(message)

    async def _answer(self, reply: asyncio.Future[Message]) -> Message:
        try:
            return await reply
        except ConnectionLost as loss:
            error = (
                self._error()
                if self._failure is not None
                else lost(f"the connection to the broker was lost before the answer: {loss}", loss)
            )
            raise error from error.__cause__  # (not from the future's own ConnectionLost)

    # --- receiving ---------------------------------------------------------------------

    def _received(self, link: _Link, data: memoryview) -> None:
        """Act on the messages of ``data``, read from the broker on ``link``."""
        if link is not self._link or self._down:
            return
        self._heard = time.monotonic()
        try:
            messages = link.conn.receive_data(data)
        except ProtocolError as exc:
            self._report_violation(link, exc)
            return
        subscriptions = self._subscriptions
        try:
            for message in messages:
                if type(message) is Delivery:
                    for sub_id in message.sub_ids:
                        sub = subscriptions.get(sub_id)
                        if sub is not None:
                            sub._put(message)
                else:
                    self._dispatch(link, message)
        except Exception as exc:  # a handler's or callback's: it ends the client
            self._callback_failed(exc)

    def _dispatch(self, link: _Link, message: Message) -> None:
        """Act on a message other than a delivery."""
        match message:
            case Ping(nonce=nonce):
                self._send_nowait(Pong(nonce))
            case Stats():
                self._stats_answered(message)
            case Error(code=code, message=text):
                # A refused Hello ends the client, also when reconnecting.
                error = BrokerError(code, text)
                (self._ended if self._welcomed else self._end_for_good)(link, error)
            case Bye(reason=reason):
                self._ended(link, ConnectionLost(f"the broker closed the connection: {reason}"))
            case Welcome():
                self._welcomed = True
                self._answered(message)
            case SubAck(sub_id=sub_id):
                sub = self._subscriptions.get(sub_id)
                if sub is not None:
                    sub._acked = True
                self._answered(message)
            case _:
                self._answered(message)

    def _report_violation(self, link: _Link, exc: ProtocolError) -> None:
        """The broker broke the protocol: tell it (best effort), end the connection.
        Before the first handshake completed, the peer may well be no hop broker."""
        reason = (
            f"protocol violation by the broker: {exc}"
            if self._opened
            else f"the peer does not speak hop's protocol (is that a hop broker's port?): {exc}"
        )
        link.write_now(error_frame(exc.code, exc.message))
        self._ended(link, lost(reason, exc))

    # --- connections -------------------------------------------------------------------

    def _use(self, link: _Link) -> None:
        """Make ``link`` the current connection."""
        self._link = link
        self._loss = None
        self._welcomed = False
        self._heard = time.monotonic()

    def _ended(self, link: _Link, error: ConnectionLost) -> None:
        """``link`` ended because of ``error``: without reconnecting the client ends;
        with it, pending answers fail and the next connection is opened."""
        if link is not self._link:
            return
        if not self._reconnecting():
            self._end_for_good(link, error)
            return
        if self._loss is not None:
            return
        self._loss = error
        self._losses += 1
        self._ready.clear()
        link.abort()
        self._fail_replies(error)
        self._call_back(self._on_disconnect, error)
        if self._reconnector is None or self._reconnector.done():
            self._reconnector = self._start(self._reconnect())

    def _end_for_good(self, link: _Link, error: ConnectionLost) -> None:
        if link is self._link:
            was_open = self._opened and self._failure is None
            self._fail(error)
            if was_open:
                self._call_back(self._on_disconnect, error)

    async def _reconnect(self) -> None:
        """Open the next connection after a jittered delay growing with each failed
        attempt, say Hello, subscribe everything again; then calls may use it."""
        policy = self._policy
        assert policy is not None
        delay = policy.initial_s
        while self._reconnecting():
            await asyncio.sleep(delay * random.uniform(0.5, 1.5))
            delay = min(delay * 2, policy.max_s)
            try:
                async with asyncio.timeout(policy.heartbeat_timeout_s):
                    link = await self._open_link(self)
                    if not self._reconnecting():
                        link.abort()
                        return
                    self.reconnects += 1
                    self._use(link)
                    await self._request(self._hello, (Welcome, 0), internal=True)
                    await self._resubscribe()
            except (OSError, TimeoutError, ConnectionLost):
                if self._link is not None and self._loss is None:
                    self._link.abort()  # (timed out: give this one up)
                    self._loss = ConnectionLost("the connection was given up")
                continue
            self._ready.set()
            self._call_back(self._on_reconnect)
            return

    async def _heartbeat(self, policy: Reconnect) -> None:
        """Ping a quiet broker; give the connection up when it stays silent."""
        period = policy.heartbeat_s / 2
        while self._failure is None:
            slept_from = time.monotonic()
            await asyncio.sleep(period)
            now = time.monotonic()
            self._heard += overrun(slept_from, period, now)  # this client's own pause
            link = self._link
            if not self._ready.is_set() or link is None:
                continue
            silent = now - self._heard
            if silent > policy.heartbeat_timeout_s:
                silence = ConnectionLost(f"nothing heard from the broker for {silent:.1f} s")
                self._ended(link, silence)
            elif silent >= policy.heartbeat_s:
                self._send_nowait(Ping(next(self._tokens)))

    # --- callbacks and ending ----------------------------------------------------------

    def _call_back(self, fn: Callable[..., object] | None, *args: Any) -> None:
        if fn is not None:
            try:
                fn(*args)
            except Exception as exc:
                self._callback_failed(exc)

    def _callback_failed(self, exc: Exception) -> None:
        """A handler or callback raised ``exc``: it ends the client (module doc)."""
        if self._callback_error is None and not self._down:
            self._callback_error = exc
        self._fail(lost(f"the client's callback failed: {exc!r}", exc))

    def _raise_callback_error(self) -> None:
        error = self._callback_error
        if error is not None and not self._callback_error_raised:
            self._callback_error_raised = True
            raise error

    def _start(self, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """Run ``work`` as a task of the client's, cancelled when it ends."""
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _fail_replies(self, error: ConnectionLost) -> None:
        for reply in (*self._replies.values(), *self._stats_replies):
            if not reply.done():
                reply.set_exception(fresh_copy(error))
        self._stats_replies.clear()

    def _fail(self, error: ConnectionLost) -> None:
        """The client is over because of ``error`` (unless it was already ending)."""
        if self._failure is None:
            self._failure = error
        self._teardown()

    def _teardown(self) -> None:
        """Close the connection, wake every waiting call, end every subscription, stop
        the client's tasks."""
        if self._down:
            return
        self._down = True
        error = self._failure or ClientClosed("the client is closed")
        self._failure = error
        link = self._link
        if link is not None:  # (what the transport holds goes out first: Bye, Error)
            link.pending.clear()
            if link.transport is not None:
                link.transport.close()
        for task in self._tasks:
            if task is not asyncio.current_task():
                task.cancel()
        self._ready.set()  # calls waiting for a reconnection raise now
        self._fail_replies(error)
        for sub in self._subscriptions.values():
            sub._close(error)
        self._closed.set()


async def _open_link(
    client: AsyncioClient, host: str, port: int, ssl_context: ssl.SSLContext | None
) -> _Link:
    """A connection to the broker, in TLS if ``ssl_context`` is given (the broker's
    certificate must name ``host``). An OSError names the broker's address and why; a
    failed TLS handshake raises ConnectionLost caused by the ``ssl.SSLError``, as in
    the trio client."""
    loop = asyncio.get_running_loop()
    try:
        _, link = await loop.create_connection(
            lambda: _Link(client),
            host,
            port,
            ssl=ssl_context,
            server_hostname=host if ssl_context is not None else None,
        )
    except ssl.SSLError as exc:  # the handshake: as the trio client's first request
        raise lost(f"TLS with the broker at {host_port(host, port)} failed: {exc}", exc) from exc
    except OSError as exc:
        raise connect_error(f"the broker at {host_port(host, port)}", exc) from exc
    return link


@asynccontextmanager
async def open_asyncio_client(
    host: str,
    port: int,
    *,
    name: str,
    secret: str | None = None,
    timeout: float = 10.0,
    ssl_context: ssl.SSLContext | None = None,
    reconnect: bool | Reconnect = False,
    on_disconnect: Callable[[ConnectionLost], object] | None = None,
    on_reconnect: Callable[[], object] | None = None,
) -> AsyncIterator[AsyncioClient]:
    """Connect to the broker at ``host``:``port`` as client ``name`` (unique in the run:
    it prefixes event ids), with the arguments and errors of ``client.open_client``;
    the client is closed when the block exits."""
    c = await AsyncioClient.connect(
        host, port, name=name, secret=secret, timeout=timeout, ssl_context=ssl_context,
        reconnect=reconnect, on_disconnect=on_disconnect, on_reconnect=on_reconnect,
    )  # fmt: skip
    async with c:
        yield c
