"""The blocking client, for scripts and notebooks: ``Client.connect(...)``.

The trio client (``client.aio``) runs in a daemon thread of its own (``trio.run``).
Calls may come from several threads. ``close()`` (or leaving the ``with`` block) ends
the thread and closes the socket; so does a connection lost for good, and
``wait_closed()`` waits for that.

The hand-off between the caller's thread and the trio thread is what a blocking
client costs beyond the trio client, so it is kept off the way of each event:

* ``publish`` checks and encodes the event in the caller's thread (an invalid event
  raises there, before anything is sent). A publish alone in time (as the trio
  client's write-through decides) that finds nothing published before still on its
  way and the connection idle is written on the socket from the caller's thread
  (`client.shared_queue` says how the two threads share the socket): no hand-off at
  all. Otherwise its frame is appended to a list shared with a feeder task in the
  trio thread (`_Feeder`), which it wakes with one ``run_sync_soon`` per batch: a
  publisher in a loop wakes it once per batch of frames, not once per event. The
  list holds at most ``OUTGOING_FRAMES`` frames; a publish that finds it full waits
  until the feeder takes them (backpressure, as the trio client's full queue).
  ``flush`` and ``close`` first wait until the feeder has handed every frame
  published before to the connection, so their guarantees are the trio client's.
* a subscription's deliveries go from the trio client's I/O task straight into a
  thread-safe queue (``queue.SimpleQueue``) that ``next`` takes from, without
  waking the trio thread; or, for a subscription with a handler, to the handler,
  called in the trio thread (no hand-off at all).

Every other call marshals one call into the trio thread with ``trio.from_thread.run``
and blocks until it is done, so exceptions raised there reach the caller with their
own type.
"""

import queue
import ssl
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from contextlib import AsyncExitStack, suppress
from functools import partial
from types import TracebackType
from typing import Any, TypeVar

import trio

from client.aio import (
    CLOSE_TIMEOUT,
    OUTGOING_FRAMES,
    WRITE_THROUGH_GAP_NS,
    AsyncClient,
    AsyncSubscription,
    Reconnect,
    open_client,
)
from client.errors import ClientClosed, ConnectionLost, SubscriptionClosed, fresh_copy
from client.events import (
    Delivery,
    checked_event,
    checked_events,
    publish_frame,
    publish_frames,
)
from routing import Filter, parse_filter

__all__ = ["Client", "Subscription"]

_T = TypeVar("_T")
_Ready = tuple[AsyncClient, trio.lowlevel.TrioToken, trio.Event, "_Feeder"] | BaseException


class _Feeder:
    """Publish frames on their way from callers' threads into the trio client (see the
    module doc). Callers `put` frames; the feeder task (`run`, in the trio thread)
    hands them to the connection in order. A failure to hand them over (the
    connection lost or closed) is raised by the next `put` or `drained`, once."""

    def __init__(self, aclient: AsyncClient, token: trio.lowlevel.TrioToken) -> None:
        self._aclient = aclient
        self._token = token
        self._lock = threading.Lock()
        self._taken = threading.Condition(self._lock)  # the feeder took the frames
        self._frames: list[bytes] = []
        self._busy = False  # frames are waiting or being handed over; the task is woken
        self._error: Exception | None = None
        self._came = trio.lowlevel.ParkingLot()  # the feeder task waits here
        self._idle = trio.lowlevel.ParkingLot()  # `drained` waits here
        self._last_ns = 0  # time.monotonic_ns() of the last hand-over
        self.trio_thread = threading.get_ident()  # (made there, by `_serve`)

    @property
    def idle(self) -> bool:
        """No frames are waiting or being handed over, and no failure waits to be raised
        by the next `put`."""
        return not self._busy and self._error is None

    def put(self, frames: list[bytes]) -> None:
        """Queue ``frames`` (in the caller's thread); wait while OUTGOING_FRAMES wait,
        except in the trio thread (a subscription's handler), which cannot wait for
        itself to take them."""
        with self._lock:
            while True:
                self._raise_error()
                if not self._frames or len(self._frames) + len(frames) <= OUTGOING_FRAMES:
                    break
                if threading.get_ident() == self.trio_thread:
                    break
                self._taken.wait()
            self._frames += frames
            if self._busy:
                return
            self._busy = True
        _soon(self._token, self._hand_over)

    def _raise_error(self) -> None:
        """Raise (once) what the feeder met, or the client's end (under the lock)."""
        error, self._error = self._error, None
        if error is not None:
            raise error
        failure = self._aclient._failure
        if failure is not None:
            raise fresh_copy(failure)

    def _take(self, room: int | None = None) -> tuple[list[bytes], bool]:
        """(the frames waiting, whether they are one publish alone in time), in the trio
        thread; marks the feeder idle when there are none. ``room``: take them only if
        they are at most that many, else none and leave the feeder busy."""
        with self._lock:
            frames = self._frames
            if not frames:
                self._busy = False
            elif room is not None and len(frames) > room:
                return [], False
            else:
                self._frames = []
                self._taken.notify_all()
        now = time.monotonic_ns()
        alone = len(frames) == 1 and now - self._last_ns >= WRITE_THROUGH_GAP_NS
        self._last_ns = now
        return frames, alone

    def _hand_over(self) -> None:
        """Woken by a caller (``run_sync_soon``): hand the frames over at once when the
        connection takes them all without waiting (one pass of the scheduler less on
        the way of an event at low rates), else wake the feeder task for them."""
        room = self._aclient._room_now()
        if self._came and room:  # the task is idle and the connection takes frames
            frames, alone = self._take(room)
            if not frames and not self._busy:
                self._idle.unpark_all()
                return
            if frames:
                self._aclient._send_frames_nowait(frames, through=alone)
                with self._lock:
                    if not self._frames:
                        self._busy = False
                if not self._busy:
                    self._idle.unpark_all()
                    return
        self._came.unpark_all()

    async def run(self) -> None:
        """The feeder task: hand the frames over as they come, until cancelled."""
        while True:
            frames, alone = self._take()
            if not frames:
                self._idle.unpark_all()
                await self._came.park()
                continue
            try:
                await self._aclient._send_frames(frames, through=alone)
            except Exception as exc:  # raised in the caller's thread
                with self._lock:
                    self._error = exc
                    self._taken.notify_all()

    async def drained(self) -> None:
        """Wait until every frame put before is handed to the connection; raise what
        the feeder met meanwhile."""
        while self._busy:
            await self._idle.park()
        with self._lock:
            error, self._error = self._error, None
        if error is not None:
            raise error


def _soon(token: trio.lowlevel.TrioToken, fn: Callable[[], object]) -> None:
    """Have the trio thread call ``fn`` soon, without waiting for it; ClientClosed once
    that thread's run has ended."""
    try:
        token.run_sync_soon(fn)
    except trio.RunFinishedError:
        raise ClientClosed("the client is closed") from None


async def _serve(
    ready: "queue.SimpleQueue[_Ready]",
    host: str,
    port: int,
    options: dict[str, Any],
) -> None:
    """The trio thread's main: connect (``options`` for ``open_client``), report to
    ``ready``, stay open until stopped or until the client ends on its own."""
    async with AsyncExitStack() as stack:
        try:
            aclient = await stack.enter_async_context(open_client(host, port, **options))
        except BaseException as exc:  # handed to the thread that called connect()
            ready.put(exc)
            return
        stop = trio.Event()
        token = trio.lowlevel.current_trio_token()
        feeder = _Feeder(aclient, token)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(feeder.run)
            nursery.start_soon(_stop_when_ended, aclient, stop)
            ready.put((aclient, token, stop, feeder))
            await stop.wait()
            with suppress(ConnectionLost), trio.move_on_after(CLOSE_TIMEOUT):
                await feeder.drained()  # what was published goes out before Bye
            nursery.cancel_scope.cancel()


async def _stop_when_ended(aclient: AsyncClient, stop: trio.Event) -> None:
    """Set ``stop`` once ``aclient`` ended (a connection lost for good): the trio thread
    then ends, and ``Client.wait_closed`` returns."""
    with suppress(ConnectionLost):
        await aclient.wait_closed()
    stop.set()


def _io_thread(errors: list[BaseException], *args: Any) -> None:
    """The client's I/O thread: `_serve` with ``args``; an exception that ends it (a
    handler's or callback's) goes to ``errors`` for ``Client.wait_closed`` or
    ``Client.close`` to raise."""
    try:
        trio.run(_serve, *args)
    except BaseException as exc:
        errors.append(exc)


class Client:
    """A blocking client connected to one broker; get one from ``Client.connect``."""

    def __init__(
        self,
        aclient: AsyncClient,
        token: trio.lowlevel.TrioToken,
        stop: trio.Event,
        feeder: _Feeder,
        thread: threading.Thread,
        errors: list[BaseException],
    ) -> None:
        """Wrap a trio client running in ``thread``, which puts into ``errors`` what ended
        it; ``Client.connect`` builds this."""
        self._aclient = aclient
        self._errors = errors
        self._token = token
        self._stop = stop
        self._feeder = feeder
        self._thread = thread
        self._closed = False  # close() was called
        self._seq_lock = threading.Lock()
        self._event_seq = 0  # of the last event published with a default id
        self._last_publish_ns = 0  # time.monotonic_ns() of the last publish

    @classmethod
    def connect(
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
    ) -> "Client":
        """Connect to the broker at ``host``:``port`` as client ``name`` (unique in the
        run: it prefixes event ids).

        ``secret``, ``ssl_context``, ``reconnect``, ``on_disconnect`` and
        ``on_reconnect`` are as for ``open_client``: with ``reconnect``, subscriptions
        survive a lost connection. The two callbacks are called in the client's I/O
        thread, as a subscription's handler is: they may ``publish``, and an exception
        they raise ends the client (``close()`` raises it). Raises ``BrokerError``
        if the broker refuses the Hello, ``ConnectionLost`` if it hangs up, ``OSError`` if
        the TCP connection fails, ``TimeoutError`` after ``timeout`` seconds.
        """
        ready: queue.SimpleQueue[_Ready] = queue.SimpleQueue()
        errors: list[BaseException] = []
        thread = threading.Thread(
            target=_io_thread,
            args=(
                errors,
                ready,
                host,
                port,
                {
                    "name": name,
                    "secret": secret,
                    "timeout": timeout,
                    "ssl_context": ssl_context,
                    "reconnect": reconnect,
                    "on_disconnect": on_disconnect,
                    "on_reconnect": on_reconnect,
                },
            ),
            name=f"hop-client-{name}",
            daemon=True,
        )
        thread.start()
        result = ready.get()
        if isinstance(result, BaseException):
            thread.join()
            raise result
        return cls(*result, thread, errors)

    @property
    def name(self) -> str:
        """The client's name, as sent in Hello."""
        return self._aclient.name

    @property
    def connected(self) -> bool:
        """Whether calls go out at once: false once closed, and while reconnecting (read
        from this thread: it may change the moment after)."""
        return not self._closed and self._aclient.connected

    def __repr__(self) -> str:
        return f"<Client {self.name!r} {'open' if self._thread.is_alive() else 'closed'}>"

    def __enter__(self) -> "Client":
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _call(self, afn: Callable[..., Awaitable[_T]], *args: Any) -> _T:
        """Run ``afn(*args)`` in the trio thread and wait for its result."""
        try:
            return trio.from_thread.run(afn, *args, trio_token=self._token)
        except (trio.RunFinishedError, trio.Cancelled):
            if (failure := self._aclient._lost_for_good()) is not None:
                error = fresh_copy(failure)  # what ended the trio thread, and its cause
                raise error from error.__cause__
            raise ClientClosed("the client is closed") from None

    def subscribe(
        self, filter: str | Filter, handler: Callable[[Delivery], object] | None = None
    ) -> "Subscription":
        """Subscribe to events matching ``filter`` (text or a ``routing.Filter``); return
        once the subscription is in force everywhere. Bad filter text raises
        ``routing.FilterSyntaxError`` before anything is sent.

        With ``handler`` (paho-mqtt's ``on_message``), each delivery is handed to
        ``handler(delivery)`` in the client's I/O thread as it is decoded, in order,
        instead of the subscription's queue (no hand-off to the caller's thread: lower
        latency). The handler must return quickly: the connection waits for it. It may
        ``publish`` (which never waits there); any other call of this client raises
        RuntimeError in it. Taking from the subscription (``next`` ...) raises
        ``ClientError``. An exception it raises ends the client: later calls raise
        ``ConnectionLost`` naming it, and ``close`` (the ``with`` block's end) raises it."""
        parsed = parse_filter(filter) if isinstance(filter, str) else filter
        deliveries: queue.SimpleQueue[Delivery | None] = queue.SimpleQueue()
        inner = self._call(self._subscribe, parsed, deliveries, handler)
        return Subscription(self, inner, deliveries, handled=handler is not None)

    async def _subscribe(
        self,
        filter: Filter,
        deliveries: "queue.SimpleQueue[Delivery | None]",
        handler: Callable[[Delivery], object] | None,
    ) -> AsyncSubscription:
        """In the trio thread: subscribe with ``handler``, or else hand the deliveries and
        then the end (None) to ``deliveries`` (none is missed: nothing runs in between)."""
        if handler is not None:
            return await self._aclient.subscribe(filter, handler)
        inner = await self._aclient.subscribe(filter)
        inner._hand_off(deliveries.put, partial(deliveries.put, None))
        return inner

    def unsubscribe(self, subscription: "Subscription") -> None:
        """Remove ``subscription`` and wait for the broker's acknowledgement; its iterator
        ends once what it had already received is consumed."""
        self._call(self._aclient.unsubscribe, subscription._inner)

    def publish(self, attributes: Mapping[str, Any], *, event_id: str | None = None) -> str:
        """Publish an event; return its id (default ``"{name}:{seq}"``, seq from 1).

        Returns once the event is on its way to the connection, in order with every
        other (see ``flush``); waits while many are (backpressure). An invalid event
        raises TypeError or ValueError before anything is sent; a lost connection
        raises ``ConnectionLost`` (when reconnecting, the next call may: events not
        handed over in time are lost)."""
        name = self._aclient.name
        event = checked_event(attributes)
        if event_id is not None:
            self._send(publish_frame(event_id, name, event, time.time_ns()))
            return event_id
        with self._seq_lock:  # (a rejected event uses no id)
            seq = self._event_seq + 1
            frame = publish_frame(f"{name}:{seq}", name, event, time.time_ns())
            self._event_seq = seq
        self._send(frame)
        return f"{name}:{seq}"

    def _send(self, frame: bytes) -> None:
        """Send a publish's ``frame``: written on the socket from this thread when it
        comes alone in time and the connection is idle (`client.shared_queue`: no
        hand-off to the I/O thread), else handed to the feeder."""
        now = time.monotonic_ns()
        alone = now - self._last_publish_ns >= WRITE_THROUGH_GAP_NS
        self._last_publish_ns = now
        if alone and threading.get_ident() != self._feeder.trio_thread:
            outgoing = self._aclient._outgoing
            rest = outgoing.write_from_thread(frame, self._idle)
            if rest is not None:
                if rest:  # the writer sends it: wake it in the trio thread
                    _soon(self._token, outgoing.resume_writer)
                return
        self._feeder.put([frame])

    def _idle(self) -> bool:
        """Whether nothing published before is still on its way to the connection, and
        the connection takes publishes now."""
        return self._feeder.idle and self._aclient._room_now() > 0

    def publish_many(self, events: Iterable[Mapping[str, Any]]) -> list[str]:
        """Publish ``events`` in order; return their ids (see
        ``AsyncClient.publish_many``): every event is checked and encoded before any is
        sent, an invalid one raises TypeError or ValueError and nothing is sent."""
        checked = checked_events(events)
        with self._seq_lock:
            ids, frames = publish_frames(
                self._aclient.name, self._event_seq, checked, time.time_ns()
            )
            self._event_seq += len(ids)
        for at in range(0, len(frames), OUTGOING_FRAMES):
            self._feeder.put(frames[at : at + OUTGOING_FRAMES])
        return ids

    def flush(self) -> None:
        """Wait until the broker has accepted everything this client sent before."""
        self._call(self._flush)

    async def _flush(self) -> None:
        await self._feeder.drained()
        await self._aclient.flush()

    def ping(self) -> float:
        """Round-trip time to the broker, in seconds."""
        return self._call(self._aclient.ping)

    def stats(self) -> dict[str, Any]:
        """The broker's counters and gauges (nested dicts)."""
        return self._call(self._aclient.stats)

    def wait_closed(self, timeout: float | None = None) -> None:
        """Block until the client ends, for a script whose work its handlers do
        (paho-mqtt's ``loop_forever``): return once it is closed (``close``, from another
        thread); raise what ended it otherwise: the exception a handler or callback
        raised (then not raised again by ``close``), or the ``ConnectionLost`` (or
        ``BrokerError``) of a connection lost for good. ``TimeoutError`` if it is still
        open after ``timeout`` seconds."""
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError(f"the client is still open after {timeout} s")
        if self._errors:
            raise self._errors.pop()
        if (failure := self._aclient._lost_for_good()) is not None:
            raise fresh_copy(failure)

    def close(self) -> None:
        """Say Bye, close the connection and wait for the trio thread to end. Pending and
        later calls raise ``ConnectionLost``. Idempotent."""
        self._closed = True
        if self._thread.is_alive():
            with suppress(trio.RunFinishedError):  # the run is ending on its own
                trio.from_thread.run_sync(self._stop.set, trio_token=self._token)
            self._thread.join()
        if self._errors:  # a handler's exception, raised once
            raise self._errors.pop()


class Subscription:
    """A subscription of the blocking ``Client``: ``sub.next(timeout)`` or ``for event in
    sub`` give the attributes of each delivered event; once what was already received
    is taken, iteration ends if the subscription is unsubscribed or the client closed,
    and raises ``ConnectionLost`` if the connection was lost.

    The queue is unbounded: the application must consume what it subscribes to.
    Deliveries reach it from the trio thread without a call into that thread.
    """

    def __init__(
        self,
        client: Client,
        inner: AsyncSubscription,
        deliveries: "queue.SimpleQueue[Delivery | None]",
        handled: bool = False,
    ) -> None:
        self._client = client
        self._inner = inner
        self._deliveries = deliveries  # filled by the trio client's I/O task; None: ended
        self._handled = handled  # its deliveries go to a handler (`Client.subscribe`)

    @property
    def id(self) -> int:
        """The subscription id on this connection."""
        return self._inner.id

    @property
    def filter(self) -> Filter:
        """The subscription's filter."""
        return self._inner.filter

    @property
    def active(self) -> bool:
        """True until unsubscribed or the connection ends (what was received before can
        still be taken)."""
        return self._inner.active

    def __repr__(self) -> str:
        return f"<Subscription {self.id} {str(self.filter)!r}>"

    def next_delivery(self, timeout: float | None = None) -> Delivery:
        """The next delivery, waiting at most ``timeout`` seconds (None: no limit).

        Raises the builtin ``TimeoutError`` when none comes in time; once what was
        received is consumed, ``SubscriptionClosed`` if unsubscribed, ``ClientClosed`` if
        the client is closed, ``ConnectionLost`` if its connection was lost.
        """
        if self._handled:
            raise self._inner._handled()
        try:
            delivery = self._deliveries.get(timeout=timeout)
        except queue.Empty:
            message = f"no event for subscription {self.id} within {timeout} s"
            raise TimeoutError(message) from None
        if delivery is None:  # the end, for every later call too
            self._deliveries.put(None)
            raise self._inner._ended()
        return delivery

    def next_batch(self, timeout: float | None = None) -> list[Delivery]:
        """The next delivery with every other one already received, waiting at most
        ``timeout`` seconds for the first (see ``next_delivery``, which raises as this
        does): for subscribers taking tens of thousands of events a second."""
        batch = [self.next_delivery(timeout)]
        get = self._deliveries.get_nowait
        try:
            while (delivery := get()) is not None:
                batch.append(delivery)
        except queue.Empty:
            return batch
        self._deliveries.put(None)  # the end: the next call raises
        return batch

    def next(self, timeout: float | None = None) -> dict[str, Any]:
        """The attributes of the next event (see ``next_delivery``)."""
        return self.next_delivery(timeout).attributes

    def __iter__(self) -> "Subscription":
        return self

    def __next__(self) -> dict[str, Any]:
        """The next event; the loop ends when unsubscribed or the client is closed, and
        raises ``ConnectionLost`` when the connection is lost."""
        try:
            return self.next()
        except (SubscriptionClosed, ClientClosed):
            raise StopIteration from None
