"""The blocking client, for scripts and notebooks: ``Client.connect(...)``.

The trio client (``client.aio``) runs in a daemon thread of its own (``trio.run``);
each method marshals one call into it with ``trio.from_thread.run`` and blocks until
it is done, so exceptions raised there reach the caller with their own type. Calls may
come from several threads. ``close()`` (or leaving the ``with`` block) ends the thread
and closes the socket.
"""

import queue
import ssl
import threading
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AsyncExitStack, suppress
from functools import partial
from types import TracebackType
from typing import Any, TypeVar

import trio

from client.aio import (
    AsyncClient,
    AsyncSubscription,
    ClientClosed,
    Delivery,
    Reconnect,
    SubscriptionClosed,
    open_client,
)
from routing import Filter, parse_filter

__all__ = ["Client", "Subscription"]

_T = TypeVar("_T")
_Ready = tuple[AsyncClient, trio.lowlevel.TrioToken, trio.Event] | BaseException


async def _serve(
    ready: "queue.SimpleQueue[_Ready]",
    host: str,
    port: int,
    options: dict[str, Any],
) -> None:
    """The trio thread's main: connect (``options`` for ``open_client``), report to
    ``ready``, stay open until stopped."""
    async with AsyncExitStack() as stack:
        try:
            aclient = await stack.enter_async_context(open_client(host, port, **options))
        except BaseException as exc:  # handed to the thread that called connect()
            ready.put(exc)
            return
        stop = trio.Event()
        ready.put((aclient, trio.lowlevel.current_trio_token(), stop))
        await stop.wait()


class Client:
    """A blocking client connected to one broker; get one from ``Client.connect``."""

    def __init__(
        self,
        aclient: AsyncClient,
        token: trio.lowlevel.TrioToken,
        stop: trio.Event,
        thread: threading.Thread,
    ) -> None:
        """Wrap a trio client running in ``thread``; ``Client.connect`` builds this."""
        self._aclient = aclient
        self._token = token
        self._stop = stop
        self._thread = thread

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
    ) -> "Client":
        """Connect to the broker at ``host``:``port`` as client ``name`` (unique in the
        run: it prefixes event ids).

        ``secret``, ``ssl_context`` and ``reconnect`` are as for ``open_client``: with
        ``reconnect``, subscriptions survive a lost connection. Raises ``BrokerError``
        if the broker refuses the Hello, ``ConnectionLost`` if it hangs up, ``OSError`` if
        the TCP connection fails, ``TimeoutError`` after ``timeout`` seconds.
        """
        ready: queue.SimpleQueue[_Ready] = queue.SimpleQueue()
        thread = threading.Thread(
            target=trio.run,
            args=(
                _serve,
                ready,
                host,
                port,
                {
                    "name": name,
                    "secret": secret,
                    "timeout": timeout,
                    "ssl_context": ssl_context,
                    "reconnect": reconnect,
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
        return cls(*result, thread)

    @property
    def name(self) -> str:
        """The client's name, as sent in Hello."""
        return self._aclient.name

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
            raise ClientClosed("the client is closed") from None

    def subscribe(self, filter: str | Filter) -> "Subscription":
        """Subscribe to events matching ``filter`` (text or a ``routing.Filter``); return
        once the subscription is in force everywhere. Bad filter text raises
        ``routing.FilterSyntaxError`` before anything is sent."""
        parsed = parse_filter(filter) if isinstance(filter, str) else filter
        return Subscription(self, self._call(self._aclient.subscribe, parsed))

    def unsubscribe(self, subscription: "Subscription") -> None:
        """Remove ``subscription`` and wait for the broker's acknowledgement; its iterator
        ends once what it had already received is consumed."""
        self._call(self._aclient.unsubscribe, subscription._inner)

    def publish(self, attributes: Mapping[str, Any], *, event_id: str | None = None) -> str:
        """Publish an event; return its id. Returns once the event is handed to the
        connection (see ``flush``); invalid events raise TypeError or ValueError."""
        return self._call(partial(self._aclient.publish, attributes, event_id=event_id))

    def flush(self) -> None:
        """Wait until the broker has accepted everything this client sent before."""
        self._call(self._aclient.flush)

    def ping(self) -> float:
        """Round-trip time to the broker, in seconds."""
        return self._call(self._aclient.ping)

    def stats(self) -> dict[str, Any]:
        """The broker's counters and gauges (nested dicts)."""
        return self._call(self._aclient.stats)

    def close(self) -> None:
        """Say Bye, close the connection and wait for the trio thread to end. Pending and
        later calls raise ``ConnectionLost``. Idempotent."""
        if self._thread.is_alive():
            with suppress(trio.RunFinishedError):  # the run is ending on its own
                trio.from_thread.run_sync(self._stop.set, trio_token=self._token)
            self._thread.join()


async def _next_batch(sub: AsyncSubscription, timeout: float | None) -> list[Delivery]:
    if timeout is None:
        return await sub.next_batch()
    with trio.move_on_after(timeout):
        return await sub.next_batch()
    raise TimeoutError(f"no event for subscription {sub.id} within {timeout} s")


class Subscription:
    """A subscription of the blocking ``Client``: ``sub.next(timeout)`` or ``for event in
    sub`` give the attributes of each delivered event; iteration ends when the
    subscription is unsubscribed (after what was already received) or the client is
    closed or loses its connection.

    The queue is unbounded: the application must consume what it subscribes to.
    Deliveries move to the calling thread in batches (everything queued at once).
    """

    def __init__(self, client: Client, inner: AsyncSubscription) -> None:
        self._client = client
        self._inner = inner
        self._buffer: deque[Delivery] = deque()

    @property
    def id(self) -> int:
        """The subscription id on this connection."""
        return self._inner.id

    @property
    def filter(self) -> Filter:
        """The subscription's filter."""
        return self._inner.filter

    def __repr__(self) -> str:
        return f"<Subscription {self.id} {str(self.filter)!r}>"

    def next_delivery(self, timeout: float | None = None) -> Delivery:
        """The next delivery, waiting at most ``timeout`` seconds (None: no limit).

        Raises the builtin ``TimeoutError`` when none comes in time, ``SubscriptionClosed``
        once unsubscribed and drained, ``ConnectionLost`` once the client is closed or
        its connection lost (and what was received is consumed).
        """
        try:
            return self._buffer.popleft()
        except IndexError:
            pass
        first, *rest = self._client._call(_next_batch, self._inner, timeout)
        self._buffer.extend(rest)
        return first

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
