"""The trio client: ``open_client`` gives an ``AsyncClient`` connected to one broker.

Only the wire protocol (``broker.protocol``) and the filter language (``routing``) are
used. Per connection, one task reads and decodes frames and one task writes: callers
encode their message and put the frame into a bounded queue of ``OUTGOING_FRAMES``
frames (the broker's `broker.outgoing.OutQueue`), which the writer drains in batches
(every frame ready, joined, one ``send_all``). So ``publish`` is cheap, and it waits
only when the queue is full (backpressure from the broker).

Requests that the broker answers (Hello, Subscribe, Unsubscribe, Flush, Ping,
StatsRequest) wait for their answer. When the connection ends (the broker's Bye or
Error, end of stream, a broken socket, a protocol violation, or ``aclose``), every
waiting call and every later call raises ``ConnectionLost`` (``BrokerError`` when the
broker sent Error), and every subscription ends.

Reconnecting (opt-in: ``open_client(..., reconnect=True)`` or a ``Reconnect`` policy)
changes that: once connected, a lost connection (also one the broker ended with Bye
or Error, or one silent for ``heartbeat_timeout_s``) is opened again with jittered,
exponentially growing delays (``initial_s`` up to ``max_s``), for as long as the
client is open. On each new connection the client subscribes again every subscription
it holds (same filters, same ids) before anything else is sent, so the same
``AsyncSubscription`` objects go on receiving. Delivery is at most once: events
published while a subscription was not in force, and events handed to a connection
that broke before the broker read them, are lost. So:

* ``publish``, ``subscribe``, ``unsubscribe``, ``flush``, ``ping`` and ``stats`` called
  while the client is reconnecting *wait* for the connection to come back, at most
  ``wait_s``, and then raise ``ConnectionLost`` (waiting, bounded, rather than failing
  at once, because outages of a restarting broker are short);
* ``subscribe`` returns once the subscription is in force, on whichever connection;
  ``unsubscribe`` cannot fail for a lost connection (the next one will not carry the
  subscription);
* ``flush`` raises ``ConnectionLost`` if the connection was lost since the previous
  ``flush`` (events published before may be lost: publish them again if they matter),
  and so do ``ping`` and ``stats`` when their connection breaks before the answer;
* a broker that refuses the Hello when reconnecting ends the client for good
  (``BrokerError``), as when connecting the first time. The first connection is not
  retried: ``open_client`` raises as without reconnecting.

The reconnecting client also sends Ping to the broker when it has heard nothing for
``heartbeat_s``. ``open_client``'s ``on_disconnect`` and ``on_reconnect`` callbacks
tell the client's user of each lost connection and of each return.
"""

import itertools
import math
import random
import ssl
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any

import trio

from broker.groups import sole_exception
from broker.liveness import overrun
from broker.netio import connect_error, host_port, socket_fd
from broker.outgoing import Outgoing
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
    new_event_frame,
)
from broker.security import secret_from_env
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
    ClientError,
    ConnectionLost,
    SubscriptionClosed,
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
from client.shared_queue import SharedOutQueue
from client.socket_reader import ReadFailed, SocketReader
from routing import Filter, validate_event

__all__ = [
    "CLOSE_TIMEOUT",
    "OUTGOING_FRAMES",
    "AsyncClient",
    "Reconnect",
    "AsyncSubscription",
    "BrokerError",
    "ClientClosed",
    "ClientError",
    "ConnectionLost",
    "Delivery",
    "SubscriptionClosed",
    "open_client",
]

OUTGOING_FRAMES = 1024
"""Frames queued for the writer before ``publish`` (and every other send) waits."""
WRITE_THROUGH_GAP_NS = 50_000
"""A publish this long or longer after the one before is written to the socket at once
if the writer is idle (no pass of the writer task: lower latency at low rates); closer
ones are queued and sent in batches by the writer."""
CLOSE_TIMEOUT = 5.0
"""Seconds ``aclose`` waits for the queued frames to go out and the broker to hang up."""
RECEIVE_SIZE = 16384
"""Bytes per socket read. The deliveries of one read are built before any consumer
runs, and while more than ~700 objects are young at once CPython's collector keeps
running, promoting the queued deliveries until full collections walk the whole heap.
Reads of 16 KiB (about 85 deliveries of 150-byte events) stay under that, so a
subscriber's collections stay few and young; smaller reads did no better
(`python -m bench.fanout_cpu --subscribers 4` counts the collections and the client's
CPU per event, docs/performance.md)."""
_IO_ERRORS = (OSError, trio.BrokenResourceError, trio.ClosedResourceError)


@dataclass
class _SendCounters:
    """What a connection's outgoing queue counts (`broker.outgoing.SendCounters`)."""

    messages_out: int = 0
    bytes_out: int = 0


def _outgoing_queue(fd: int | None) -> SharedOutQueue:
    """A connection's queue of frames for its writer: at most ``OUTGOING_FRAMES``
    waiting, all of them sent in one batch. Its `Outgoing` never defers (that is for a
    broker handling a read), so a put wakes an idle writer at once; but a publish that
    comes ``WRITE_THROUGH_GAP_NS`` or more after the one before is written through the
    socket ``fd`` (None: TLS) if the writer is idle (`OutQueue.put_through`). The
    blocking client's callers may write through it from their threads too."""
    return SharedOutQueue(OUTGOING_FRAMES, OUTGOING_FRAMES, Outgoing(), _SendCounters(), fd)


class AsyncSubscription(QueuedSubscription):
    """A subscription of an ``AsyncClient``: ``await sub.next()`` or ``async for event in
    sub`` give the attributes of each delivered event. Iteration ends (after what was
    already queued) when the subscription is unsubscribed or the client is closed; a
    connection lost raises ``ConnectionLost`` from the loop, as a broken trio channel
    does, so a program never mistakes a failure for the end of the stream.

    The queue is unbounded, so a slow consumer never blocks the connection: the
    application must consume what it subscribes to. A reconnecting client keeps its
    subscriptions across connections: they end only when the client is closed. A
    subscription made with a handler (``AsyncClient.subscribe``) queues nothing: each
    delivery goes to the handler.
    """

    def __init__(self, client: "AsyncClient", sub_id: int, filter: Filter) -> None:
        super().__init__(sub_id, filter)
        self._client = client
        self._arrived = trio.lowlevel.ParkingLot()  # where consumers wait for more
        self._on_end: Callable[[], object] | None = None

    async def next_delivery(self) -> Delivery:
        queue = self._queue
        if queue:  # a checkpoint all the same, as trio's channels do
            await trio.lowlevel.checkpoint_if_cancelled()
            delivery = queue.popleft()
            await trio.lowlevel.cancel_shielded_checkpoint()
            return delivery
        await self._wait()
        return queue.popleft()

    async def next_batch(self) -> list[Delivery]:
        """Wait for the next delivery; return it with every other one already queued."""
        queue = self._queue
        if queue:  # a checkpoint all the same
            await trio.lowlevel.checkpoint_if_cancelled()
            await trio.lowlevel.cancel_shielded_checkpoint()
        else:
            await self._wait()
        batch = list(queue)
        queue.clear()
        return batch

    async def _wait(self) -> None:
        """Wait until a delivery is queued, reading the connection meanwhile if nobody
        else does (`client.socket_reader`); raise why none will come."""
        queue = self._queue
        while not queue:
            if not self._active:
                raise self._ended()
            if self._handler is not None:
                raise self._handled()
            if not await self._client._read_for(queue):
                await self._arrived.park()

    def _hand_off(
        self, handler: Callable[[Delivery], object], on_end: Callable[[], object] | None = None
    ) -> None:
        """From now on, give each delivery to ``handler`` (in the I/O task, as it is
        decoded, without waiting) instead of queuing it, and call ``on_end`` once the
        subscription ends; what is queued goes first. For ``subscribe(..., handler=)``
        and for a consumer in another thread (`client.blocking`)."""
        while self._queue:
            handler(self._queue.popleft())
        if not self._active:
            if on_end is not None:
                on_end()
            return
        self._handler, self._on_end = handler, on_end
        self._client._handlers = True
        self._put = handler  # type: ignore[method-assign,assignment]  # the I/O task's call, direct

    def _put(self, delivery: Delivery) -> None:
        if self._active:
            self._queue.append(delivery)
            if self._arrived:
                self._arrived.unpark()

    def _close(self, error: ConnectionLost | None) -> None:
        """Accept nothing more; ``error`` is why (None: unsubscribed)."""
        if self._active:
            self._active = False
            self._end = error
            self._arrived.unpark_all()
            if self._on_end is not None:
                self._on_end()


class _Reply:
    """A slot for the broker's answer to one request; left empty if the connection ends
    (``loss`` then says why, when the client goes on to reconnect)."""

    __slots__ = ("event", "message", "loss")

    def __init__(self) -> None:
        self.event = trio.Event()
        self.message: Message | None = None
        self.loss: ConnectionLost | None = None


class AsyncClient(ClientCalls[AsyncSubscription, _Reply]):
    """A trio client connected to one broker; get one from ``open_client``."""

    def __init__(
        self,
        stream: trio.abc.Stream,
        name: str,
        nursery: trio.Nursery,
        reconnect: Reconnect | None = None,
        open_stream: Callable[[], Awaitable[trio.abc.Stream]] | None = None,
        on_disconnect: Callable[[ConnectionLost], object] | None = None,
        on_reconnect: Callable[[], object] | None = None,
    ) -> None:
        """Wrap a freshly opened ``stream`` and start its I/O task in ``nursery``; the
        handshake is not done yet (``open_client`` does it). With a ``reconnect``
        policy, ``open_stream`` opens the next connection. ``on_disconnect`` and
        ``on_reconnect`` are as for ``open_client``, which checks them."""
        if reconnect is not None and open_stream is None:
            raise ValueError("reconnecting needs open_stream")
        self.name = name
        self.reconnects = 0  # connections opened again after a loss
        self._on_disconnect = on_disconnect
        self._on_reconnect = on_reconnect
        self._policy = reconnect
        self._wait_s = reconnect.wait_s if reconnect else 0.0
        self._open_stream = open_stream
        self._hello: Hello | None = None  # said again on each new connection
        # Set while calls may use the connection: always without reconnecting; with it,
        # from the handshake (and resubscribing) to the loss of the connection.
        self._ready = trio.Event()
        if reconnect is None:
            self._ready.set()
        self._conn_scope = trio.CancelScope()
        # Why the current connection ended, once it is ending (reconnecting only).
        self._loss: ConnectionLost | None = None
        self._welcomed = False
        self._opened = False  # the first handshake completed (`open_client` returned it)
        self._losses = 0  # connections lost, and how many of them `flush` reported
        self._flushed_losses = 0
        self._heard = time.monotonic()  # when data last came from the broker
        self._stream = stream
        self._conn = Connection("initiator", build_deliver=delivery_of)
        self._outgoing = _outgoing_queue(socket_fd(stream))
        self._reader = self._socket_reader(stream)
        # A subscription was given a handler: from then on no consumer reads the
        # socket, so that handlers run only in the I/O task.
        self._handlers = False
        self._last_publish_ns = 0  # time.time_ns() of the last publish
        self._failure: ConnectionLost | None = None  # set once the connection is ending
        self._down = False  # torn down: waiters woken, subscriptions ended, I/O cancelled
        self._io_scope = trio.CancelScope()
        self._io_done = trio.Event()
        self._writer_done = trio.Event()
        self._replies: dict[ReplyKey, _Reply] = {}
        self._stats_replies: deque[_Reply] = deque()
        self._subscriptions: dict[int, AsyncSubscription] = {}
        self._sub_ids = itertools.count(1)
        self._event_seq = 0  # of the last event published with a default id
        self._tokens = itertools.count(1)
        nursery.start_soon(self._run_io)

    def __repr__(self) -> str:
        return f"<AsyncClient {self.name!r} {'closed' if self._failure else 'open'}>"

    @property
    def connected(self) -> bool:
        """Whether calls go out at once: false once closed, and while reconnecting."""
        return self._failure is None and self._ready.is_set()

    # --- public API --------------------------------------------------------------------

    async def subscribe(
        self, filter: str | Filter, handler: Callable[[Delivery], object] | None = None
    ) -> AsyncSubscription:
        """Subscribe to events matching ``filter`` (text or a ``routing.Filter``); return
        once the broker acknowledged it, i.e. it is in force everywhere in the network.

        Bad filter text raises ``routing.FilterSyntaxError`` before anything is sent. If
        the call is cancelled while waiting for the acknowledgement, the broker may keep
        the subscription; what it delivers for it is ignored.

        With ``handler`` (what gmqtt's and paho-mqtt's ``on_message`` are), each delivery
        is handed to ``handler(delivery)`` instead of the subscription's queue: in order,
        those that came before the acknowledgement from within ``subscribe``, then each
        in the client's I/O task as it is decoded, without a trip through the scheduler
        (lower latency at low rates than ``next_batch``; docs/performance.md). The
        handler must not block: the connection waits for it. It gets nothing more once
        unsubscribed or the connection ends (``active`` says which); ``next`` and the
        other ways of taking deliveries raise ``ClientError``. An exception it raises
        propagates: out of ``subscribe`` for a delivery handed over there (the
        subscription is then dropped, as after a cancelled ``subscribe``), otherwise out
        of the I/O task, which ends the client and leaves ``open_client``'s block with
        that exception (as an exception in any task of a nursery does).
        """
        parsed = as_filter(filter)
        if handler is not None:
            check_callback(handler, "handler")
        sub = AsyncSubscription(self, next(self._sub_ids), parsed)
        self._subscriptions[sub.id] = sub  # events may come before the SubAck
        try:
            await self._subscribe(sub)
        except BaseException:
            self._drop(sub)
            raise
        if handler is not None:
            try:
                sub._hand_off(handler)
            except BaseException:  # raised for an early delivery: no subscription left
                self._drop(sub)
                self._send_nowait(Unsubscribe(sub.id))  # (its UnsubAck is not awaited)
                raise
        return sub

    async def publish(self, attributes: Mapping[str, Any], *, event_id: str | None = None) -> str:
        """Publish an event; return its id (default ``"{name}:{seq}"``, seq from 1).

        Returns once the event is handed to the connection (see ``flush``); waits while
        the outgoing queue is full. An invalid event raises TypeError or ValueError
        before anything is sent.
        """
        event = checked_event(attributes)
        now = time.time_ns()
        name = self.name
        if event_id is None:
            seq = self._event_seq + 1
            event_id = f"{name}:{seq}"
            try:
                frame = new_event_frame(event_id, name, event, now)
            except OverflowError:  # (`publish_frame`, inline)
                validate_event(event)
                raise
            self._event_seq = seq  # (a rejected event uses no id)
        else:
            frame = publish_frame(event_id, name, event, now)
        alone = now - self._last_publish_ns >= WRITE_THROUGH_GAP_NS
        self._last_publish_ns = now
        # `_send`'s way, straight: queue the frame if the connection is up and its
        # queue has room (nearly always); else `_send` waits, reconnects or raises.
        await trio.lowlevel.checkpoint_if_cancelled()
        outgoing = self._outgoing
        if (
            self._failure is None
            and not outgoing.closed
            and self._ready.is_set()
            and (outgoing.put_through if alone else outgoing.put_nowait)(
                self._conn.send_encoded(Publish, frame)
            )
        ):
            return event_id
        await self._send(frame, through=alone)
        return event_id

    async def publish_many(self, events: Iterable[Mapping[str, Any]]) -> list[str]:
        """Publish ``events`` in order, as many ``publish`` calls would; return their
        ids. Cheaper per event than ``publish`` (one call, one checkpoint, the frames
        queued together); they share one publication time, that of the call.

        Every event is checked and encoded before any is sent: an invalid one raises
        TypeError or ValueError (noting its index) and nothing is sent. Returns once
        all are handed to the connection (see ``flush``), waiting while the outgoing
        queue is full; cancelled meanwhile, the first ones may have been handed over.
        """
        checked = checked_events(events)
        if not checked:
            await trio.lowlevel.checkpoint()
            return []
        now = time.time_ns()
        ids, frames = publish_frames(self.name, self._event_seq, checked, now)
        self._event_seq += len(ids)
        self._last_publish_ns = now
        await self._send_frames(frames)
        return ids

    async def wait_closed(self) -> None:
        """Wait until the client ends, for a task whose work its handlers do (paho-mqtt's
        ``loop_forever``): return once it is closed (``aclose``, from another task);
        raise what ended it otherwise, the ``ConnectionLost`` (or ``BrokerError``) of a
        connection lost for good. (A handler's or callback's exception leaves
        ``open_client``'s block instead, cancelling this wait.)"""
        await self._io_done.wait()
        await trio.lowlevel.checkpoint()  # the I/O task's exception cancels us first
        if (failure := self._lost_for_good()) is not None:
            raise fresh_copy(failure)

    async def aclose(self) -> None:
        """Close the connection: send Bye after everything queued, wait (at most
        ``CLOSE_TIMEOUT``) for the broker to hang up, then close the socket. Pending and
        later calls raise ``ConnectionLost``; subscriptions end. Idempotent."""
        try:
            if self._failure is None:
                self._failure = ClientClosed("the client is closed")
                if self._ready.is_set():  # else reconnecting: no connection to say Bye on
                    with trio.move_on_after(CLOSE_TIMEOUT):
                        await self._drain_outgoing(self._conn.send(Bye("closing")))
                        await self._io_done.wait()  # the reader sees the broker's Bye or EOF
        finally:
            self._teardown()
        await self._io_done.wait()

    # --- sending -----------------------------------------------------------------------

    async def _send(
        self, message: Message | bytes, internal: bool = False, through: bool = False
    ) -> None:
        """Encode ``message`` and queue its frame for the writer; bytes are the frame of a
        Publish already (`new_event_frame`).

        Not a schedule point while the queue has room (only a cancellation point): a
        task publishing in a loop fills the queue, and the writer then sends it in
        large batches, instead of one trip through the scheduler per event. With
        ``through`` (a publish alone in time), a frame that finds the writer idle is
        written at once instead (`OutQueue.put_through`).

        When reconnecting, waits for the connection (see ``_wait_ready``) and tries the
        next connection if this one ends while waiting for room; ``internal`` messages
        (handshake, resubscribing) belong to the current connection only.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        deadline = math.inf
        while True:
            if self._failure is not None:
                raise self._error()
            if internal and self._loss is not None:
                raise ConnectionLost("the connection to the broker was lost")
            if not (internal or self._ready.is_set()):
                deadline = min(deadline, trio.current_time() + self._wait_s)
                await self._wait_ready(deadline)
                continue
            if type(message) is bytes:
                frame = self._conn.send_encoded(Publish, message)
            else:
                frame = self._conn.send(message)  # type: ignore[arg-type]
            outgoing = self._outgoing
            put = outgoing.put_through if through else outgoing.put_nowait
            if not outgoing.closed and (put(frame) or await outgoing.put(frame)):
                return
            # The queue was closed: the connection is lost (or the client closed).
            if not self._reconnecting():
                raise self._error()
            if internal:
                raise ConnectionLost("the connection to the broker was lost")

    async def _send_frames(self, frames: list[bytes], through: bool = False) -> None:
        """Queue the Publish ``frames`` (`new_event_frame`) in order, as ``_send`` of
        each would, but with one checkpoint and one check of the connection for all:
        waits for room as they go; when reconnecting, those the lost connection did
        not take go to the next one. ``through``: a lone frame is written at once if
        the writer is idle (`OutQueue.put_through`)."""
        await trio.lowlevel.checkpoint_if_cancelled()
        deadline = math.inf
        done, count = 0, len(frames)
        while True:
            if self._failure is not None:
                raise self._error()
            if not self._ready.is_set():
                deadline = min(deadline, trio.current_time() + self._wait_s)
                await self._wait_ready(deadline)
                continue
            self._conn.send_encoded(Publish, frames[done])
            outgoing = self._outgoing
            put = outgoing.put_through if through and count == 1 else outgoing.put_nowait
            while done < count and not outgoing.closed:
                frame = frames[done]
                if put(frame) or await outgoing.put(frame):
                    done += 1
            if done == count:
                return
            if not self._reconnecting():  # the queue was closed: the connection is lost
                raise self._error()

    def _room_now(self) -> int:
        """How many Publish frames `_send_frames_nowait` would queue now (0: none, the
        connection is not ready or its queue is full)."""
        outgoing = self._outgoing
        if (
            self._failure is not None
            or outgoing.closed
            or not self._ready.is_set()
            or not self._conn.may_send(Publish)
        ):
            return 0
        return max(0, outgoing.limit - len(outgoing.frames))

    def _send_frames_nowait(self, frames: list[bytes], through: bool = False) -> None:
        """``_send_frames`` without waiting, for at most `_room_now` frames."""
        outgoing = self._outgoing
        if through and len(frames) == 1:
            outgoing.put_through(frames[0])
        else:
            put = outgoing.put_nowait
            for frame in frames:
                put(frame)

    async def _wait_ready(self, deadline: float) -> None:
        """Wait until the connection is back; ``ConnectionLost`` after ``deadline``."""
        with trio.move_on_at(deadline):
            await self._ready.wait()
            return
        raise ConnectionLost(f"not reconnected to the broker in {self._wait_s} s")

    def _send_nowait(self, message: Message) -> None:
        """Queue ``message`` if the connection is open and the queue has room, else drop
        it (used for Pong: a writer that far behind cannot answer in time anyway)."""
        if self._usable():
            self._outgoing.put_nowait(self._conn.send(message))

    def _new_reply(self) -> _Reply:
        return _Reply()

    def _set_reply(self, reply: _Reply, message: Message) -> None:
        reply.message = message
        reply.event.set()

    async def _answer(self, reply: _Reply) -> Message:
        await reply.event.wait()
        if reply.message is None:
            if self._failure is not None:
                raise self._error()
            reason = "the connection to the broker was lost before the answer"
            if reply.loss is not None:
                raise lost(f"{reason}: {reply.loss}", reply.loss)
            raise ConnectionLost(reason)
        return reply.message

    async def _drain_outgoing(self, last_frame: bytes) -> None:
        """Queue ``last_frame`` after everything else, end the queue, and wait until the
        writer has written it all and half-closed the stream."""
        await self._outgoing.end(last_frame)  # (a closed queue takes nothing)
        await self._writer_done.wait()

    # --- the I/O task ------------------------------------------------------------------

    async def _run_io(self) -> None:
        try:
            with self._io_scope:
                while True:
                    await self._run_connection()
                    if not self._reconnecting():
                        break
                    self._disconnected(self._loss or ConnectionLost("the connection ended"))
                    await self._reconnect()
            # (not for a client its user closed, nor one `open_client` did not return)
            if self._opened and (failure := self._lost_for_good()) is not None:
                self._disconnected(failure)
        except Exception as exc:  # a handler's or callback's: it ends the client
            cause = sole_exception(exc)
            self._fail(lost(f"the client's I/O task failed: {cause!r}", cause))
            raise
        finally:
            self._fail(ConnectionLost("the connection's I/O task ended"))  # closes the queue
            try:
                await trio.aclose_forcefully(self._stream)  # (raises Cancelled if outer
            finally:  # scopes are cancelled: this task is done with the stream all the same)
                self._io_done.set()

    async def _run_connection(self) -> None:
        """Read and write the current connection until it ends."""
        with self._conn_scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._read_loop)
                nursery.start_soon(self._write_loop)
                if self._policy is not None:
                    nursery.start_soon(self._heartbeat, self._policy)
                    if self.reconnects:
                        nursery.start_soon(self._restore)

    def _disconnected(self, error: ConnectionLost) -> None:
        """Tell ``on_disconnect`` that a connection ended because of ``error``."""
        if self._on_disconnect is not None:
            self._on_disconnect(error)

    async def _reconnect(self) -> None:
        """Open the next connection, after a jittered delay growing with each failed
        attempt; its ``_restore`` task then makes it ready."""
        policy, open_stream = self._policy, self._open_stream
        assert policy is not None and open_stream is not None
        self._outgoing.close()  # before its socket (`client.shared_queue`)
        await trio.aclose_forcefully(self._stream)
        delay = policy.initial_s
        while True:
            await trio.sleep(delay * random.uniform(0.5, 1.5))
            delay = min(delay * 2, policy.max_s)
            with trio.move_on_after(policy.heartbeat_timeout_s):
                try:
                    stream = await open_stream()
                except OSError:
                    continue
                self._use(stream)
                return

    def _use(self, stream: trio.abc.Stream) -> None:
        """Make ``stream`` the current connection, with a fresh protocol state."""
        self.reconnects += 1
        self._stream = stream
        self._conn = Connection("initiator", build_deliver=delivery_of)
        self._outgoing = _outgoing_queue(socket_fd(stream))
        self._reader = self._socket_reader(stream)
        self._writer_done = trio.Event()
        self._conn_scope = trio.CancelScope()
        self._loss = None
        self._welcomed = False
        self._heard = time.monotonic()

    async def _handshake(self, hello: Hello) -> None:
        """Say Hello, wait for Welcome; then calls may use the connection."""
        self._hello = hello
        await self._request(hello, (Welcome, 0), internal=True)
        self._opened = True
        self._ready.set()

    async def _restore(self) -> None:
        """On a new connection: the handshake, then every subscription again; then
        calls may use it, and ``on_reconnect`` hears of it."""
        assert self._hello is not None
        try:
            await self._request(self._hello, (Welcome, 0), internal=True)
            await self._resubscribe()
        except ConnectionLost:  # lost again: the next one restores
            return
        self._ready.set()
        if self._on_reconnect is not None:
            self._on_reconnect()

    async def _heartbeat(self, policy: Reconnect) -> None:
        """Ping a quiet broker; give the connection up when it stays silent."""
        period = policy.heartbeat_s / 2
        while True:
            slept_from = time.monotonic()
            await trio.sleep(period)
            now = time.monotonic()
            self._heard += overrun(slept_from, period, now)  # this client's own pause
            silent = now - self._heard
            if silent > policy.heartbeat_timeout_s:
                self._lose(ConnectionLost(f"nothing heard from the broker for {silent:.1f} s"))
                return
            if silent >= policy.heartbeat_s and self._ready.is_set():
                self._send_nowait(Ping(next(self._tokens)))

    async def _write_loop(self) -> None:
        try:
            await self._outgoing.writer(self._stream)  # until ended and all sent
            if isinstance(self._stream, trio.abc.HalfCloseableStream):  # TLS is not
                await self._stream.send_eof()  # Bye or Error is out
        except _IO_ERRORS as exc:
            self._lose(_io_failed("writing to", exc))
        finally:
            self._writer_done.set()

    async def _read_loop(self) -> None:
        try:
            if self._reader is None:  # TLS
                while data := await self._receive_some():
                    self._received(data)
            else:
                await self._reader.run()
            self._lose(ConnectionLost("the broker closed the connection"))
        except ProtocolError as exc:
            await self._report_violation(exc)
        except ReadFailed as exc:  # (what a handler raises, OSErrors too, is its own)
            self._lose(_io_failed("reading from", exc.error))

    async def _receive_some(self) -> bytes | bytearray:
        """A read of a stream without a socket of its own (TLS); ReadFailed if it fails."""
        try:
            return await self._stream.receive_some(RECEIVE_SIZE)
        except _IO_ERRORS as exc:
            raise ReadFailed(exc) from exc

    def _socket_reader(self, stream: trio.abc.Stream) -> SocketReader | None:
        """The reading side of ``stream``'s socket (None for TLS and in-memory streams,
        read through the stream only, by the reader task)."""
        fd = socket_fd(stream)
        return None if fd is None else SocketReader(fd, RECEIVE_SIZE, self._received)

    async def _read_for(self, queue: deque[Delivery]) -> bool:
        """A consumer of ``queue`` reads the connection until a delivery is queued there
        or the connection ends (`SocketReader.read_until`); False, without waiting,
        when it may not: another task reads it, a subscription has a handler, the
        connection is ending, or it has no socket of its own (TLS)."""
        reader = self._reader
        if reader is None or not reader.available or self._handlers or not self._usable():
            return False

        def usable() -> bool:
            return self._reader is reader and self._usable()

        await reader.read_until(queue, usable)
        return True

    def _usable(self) -> bool:
        """Whether the current connection is up (not failed, not being lost)."""
        return self._failure is None and self._loss is None

    def _lost_for_good(self) -> ConnectionLost | None:
        """What ended the client, if something other than its user closing it did."""
        failure = self._failure
        return None if isinstance(failure, ClientClosed | None) else failure

    def _received(self, data: bytes | bytearray) -> None:
        """Act on the messages of ``data``, read from the broker."""
        self._heard = time.monotonic()
        for message in self._conn.receive_data(data):
            if type(message) is Delivery:  # nearly all: no trip through the match
                self._deliver(message)
            else:
                self._dispatch(message)

    async def _report_violation(self, exc: ProtocolError) -> None:
        """The broker broke the protocol: tell it (best effort), then end the connection.
        Before the first handshake completed, the peer may well be no hop broker at all
        (a wrong port): the reason says so."""
        reason = (
            f"protocol violation by the broker: {exc}"
            if self._opened
            else f"the peer does not speak hop's protocol (is that a hop broker's port?): {exc}"
        )
        if self._reconnecting():
            self._lose(lost(reason, exc))
            return
        if self._failure is None:
            self._failure = lost(reason, exc)
            with trio.move_on_after(CLOSE_TIMEOUT):
                await self._drain_outgoing(error_frame(exc.code, exc.message))
        self._teardown()

    def _dispatch(self, message: Message) -> None:
        """Act on a message other than a Deliver (`_read_loop` delivers those, as the
        connection's `delivery_of` made them)."""
        match message:
            case Ping(nonce=nonce):
                self._send_nowait(Pong(nonce))
            case Stats():
                self._stats_answered(message)
            case Error(code=code, message=text):
                # A refused Hello ends the client, also when reconnecting.
                (self._lose if self._welcomed else self._fail)(BrokerError(code, text))
            case Bye(reason=reason):
                self._lose(ConnectionLost(f"the broker closed the connection: {reason}"))
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

    def _deliver(self, delivery: Delivery) -> None:
        subscriptions = self._subscriptions
        for sub_id in delivery.sub_ids:
            sub = subscriptions.get(sub_id)
            if sub is not None:
                sub._put(delivery)

    # --- ending ------------------------------------------------------------------------

    def _lose(self, error: ConnectionLost) -> None:
        """The current connection ended because of ``error``. Without reconnecting the
        client ends; with it, pending answers fail and the I/O task reconnects."""
        if not self._reconnecting():
            self._fail(error)
            return
        if self._loss is not None:
            return
        self._loss = error
        self._losses += 1
        if self._ready.is_set():
            self._ready = trio.Event()
        self._outgoing.close()  # senders blocked on a full queue retry on the next one
        self._conn_scope.cancel()
        for reply in (*self._replies.values(), *self._stats_replies):
            reply.loss = error
            reply.event.set()
        self._stats_replies.clear()

    def _fail(self, error: ConnectionLost) -> None:
        """The connection is over because of ``error`` (unless it was already ending)."""
        if self._failure is None:
            self._failure = error
        self._teardown()

    def _teardown(self) -> None:
        """Wake every waiting call, end every subscription, stop the I/O task."""
        if self._down:
            return
        self._down = True
        error = self._failure or ClientClosed("the client is closed")
        self._failure = error
        self._outgoing.close()  # senders blocked on a full queue raise ConnectionLost
        self._io_scope.cancel()
        self._ready.set()  # calls waiting for a reconnection raise now
        for reply in (*self._replies.values(), *self._stats_replies):
            reply.event.set()
        for sub in self._subscriptions.values():
            sub._close(error)


def _io_failed(doing: str, exc: BaseException) -> ConnectionLost:
    """The loss of a read or write that raised ``exc``, caused by what broke beneath
    trio's BrokenResourceError (an OSError, or the SSLError of a TLS connection that
    failed, said as such: the asyncio client's words for it too)."""
    if isinstance(exc, trio.BrokenResourceError) and exc.__cause__ is not None:
        exc = exc.__cause__
    if isinstance(exc, ssl.SSLError):
        plain = " (is that broker serving TLS?)" if "WRONG_VERSION_NUMBER" in str(exc) else ""
        return lost(f"TLS with the broker failed: {exc}{plain}", exc)
    return lost(f"{doing} the broker failed: {exc!r}", exc)


async def _open_stream(host: str, port: int, ssl_context: ssl.SSLContext | None) -> trio.abc.Stream:
    """A TCP stream to the broker, in TLS if ``ssl_context`` is given (the broker's
    certificate must name ``host``). An OSError names the broker's address and why."""
    try:
        stream = await trio.open_tcp_stream(host, port)
    except OSError as exc:
        raise connect_error(f"the broker at {host_port(host, port)}", exc) from exc
    if ssl_context is None:
        return stream
    return trio.SSLStream(stream, ssl_context, server_hostname=host)


async def _connect(
    nursery: trio.Nursery,
    host: str,
    port: int,
    name: str,
    secret: str | None,
    timeout: float,
    ssl_context: ssl.SSLContext | None = None,
    reconnect: Reconnect | None = None,
    on_disconnect: Callable[[ConnectionLost], object] | None = None,
    on_reconnect: Callable[[], object] | None = None,
) -> AsyncClient:
    connected = False
    with trio.move_on_after(timeout):
        stream = await _open_stream(host, port, ssl_context)
        connected = True
        reopen = partial(_open_stream, host, port, ssl_context)
        client = AsyncClient(stream, name, nursery, reconnect, reopen, on_disconnect, on_reconnect)
        try:
            await client._handshake(Hello(PROTOCOL_VERSION, "client", name, secret))
        except BaseException:
            client._fail(ConnectionLost("the handshake did not complete"))
            raise
        return client
    if connected:
        raise TimeoutError(
            f"connected to {host_port(host, port)}, but no hop broker answered the "
            f"handshake within {timeout} s (is that a hop broker's port?)"
        )
    raise TimeoutError(f"no connection to the broker at {host_port(host, port)} within {timeout} s")


@asynccontextmanager
async def open_client(
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
) -> AsyncIterator[AsyncClient]:
    """Connect to the broker at ``host``:``port`` as client ``name`` (unique in the run:
    it prefixes event ids); the client is closed (``aclose``) when the block exits.

    ``secret`` is presented to brokers that require one (default: ``$HOP_SECRET``, or the
    file named by ``$HOP_SECRET_FILE``); ``ssl_context`` connects with TLS (see
    ``broker.security.client_ssl_context``).

    Raises ``BrokerError`` if the broker refuses the Hello, ``ConnectionLost`` if it hangs
    up, ``OSError`` if the TCP connection fails, ``TimeoutError`` after ``timeout``
    seconds. Exceptions leave the block as they were raised, not wrapped in a group,
    also when closing the client on the way out ends a sibling task's ``sub.next()``.
    ``reconnect``: True (default ``Reconnect()`` policy) or a policy to reconnect
    after losing the connection (see the module doc); off by default.

    ``on_disconnect(error)``, the counterpart of paho-mqtt's and gmqtt's callback of
    that name, is called each time a connection ends other than by the client's own
    doing (closing it, or a handler's or callback's exception, which is raised
    instead), with the ``ConnectionLost`` (or ``BrokerError``) saying why: before
    reconnecting, or as the client ends. ``on_reconnect()`` is called once a new
    connection is in use again, every subscription renewed. Both are plain functions
    called in the client's I/O task, like a subscription's handler: they must not
    block, and an exception they raise ends the client and leaves this block (a
    TypeError, before connecting, for an async function or a non-callable).
    """
    check_port(port)
    check_connection_callbacks(on_disconnect, on_reconnect)
    policy = reconnect_policy(reconnect)
    try:
        async with trio.open_nursery() as nursery:
            if secret is None:
                secret = secret_from_env()
            client = await _connect(
                nursery, host, port, name, secret, timeout, ssl_context, policy,
                on_disconnect, on_reconnect,
            )  # fmt: skip
            try:
                yield client
            except trio.Cancelled:
                await client.aclose()  # cancelled as well: the socket closes at once
                raise
            except BaseException:
                # Shielded, for a bounded time: closing ends the subscriptions, which
                # can end a sibling task waiting in `sub.next()`, whose nursery then
                # cancels this one; the block's exception, not that Cancelled, must be
                # what leaves it.
                deadline = trio.current_time() + 2 * CLOSE_TIMEOUT
                with trio.CancelScope(shield=True, deadline=deadline):
                    await client.aclose()
                raise
            await client.aclose()
    except BaseExceptionGroup as group:
        # A Cancelled of an outer scope beside another exception: that one unwinds the
        # stack as well, and says more.
        _, others = group.split(trio.Cancelled)
        error = sole_exception(others or group)
        if isinstance(error, BaseExceptionGroup):
            raise
        context = error.__context__
        try:
            raise error
        finally:
            error.__context__ = context
