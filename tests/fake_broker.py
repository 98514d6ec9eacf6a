"""A fake broker for the clients' tests, on loopback.

It speaks the real wire protocol (``broker.protocol``): it answers Hello with Welcome,
acknowledges requests, and echoes each Publish back to the publishing connection as one
Deliver tagged with every subscription of that connection that matches. Trio tests run
it in their own loop; `fake_broker_thread` runs it in a trio loop of its own thread,
for the blocking and asyncio clients.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any, TypeVar

import trio

from broker.protocol import (
    PROTOCOL_VERSION,
    Bye,
    Connection,
    Deliver,
    Error,
    Flush,
    FlushAck,
    Hello,
    Message,
    Ping,
    Pong,
    Publish,
    Stats,
    StatsRequest,
    SubAck,
    Subscribe,
    UnsubAck,
    Unsubscribe,
    Welcome,
)
from routing import Filter

_T = TypeVar("_T")
HOST = "127.0.0.1"


class Link:
    """The fake broker's side of one client connection."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.conn = Connection("acceptor")
        self.subs: dict[int, Filter] = {}
        self._lock = trio.Lock()

    async def send(self, message: Message) -> None:
        await self.send_raw(self.conn.send(message))

    async def send_raw(self, data: bytes) -> None:
        async with self._lock:
            await self.stream.send_all(data)


class FakeBroker:
    """A minimal broker for one-connection tests (see the module doc).

    ``refuse``: answer Hello with this Error; ``answer_hello``: False to stay silent;
    ``flush_gate``: if set, FlushAck waits for it (``flush_seen`` is set on Flush);
    ``stall``: read nothing more after answering Hello; ``read_gate``: if set, read
    nothing more after answering Hello until it is set.
    """

    def __init__(self) -> None:
        self.port = 0
        self.received: list[Message] = []
        self.delivered: list[Deliver] = []
        self.links: list[Link] = []
        self.refuse: Error | None = None
        self.answer_hello = True
        self.flush_gate: trio.Event | None = None
        self.flush_seen = trio.Event()
        self.stall = False
        self.read_gate: trio.Event | None = None
        self.early: dict[str, Any] | None = None  # deliver this event before each SubAck
        self.token: trio.lowlevel.TrioToken | None = None

    async def start(self, nursery: trio.Nursery) -> None:
        listeners = await nursery.start(partial(trio.serve_tcp, self._handle, 0, host=HOST))
        self.port = listeners[0].socket.getsockname()[1]

    @property
    def link(self) -> Link:
        return self.links[-1]

    def kinds(self) -> list[type]:
        return [type(m) for m in self.received]

    def call(self, afn: Callable[..., Awaitable[_T]], *args: Any) -> _T:
        """Run ``afn(*args)`` in the fake broker's thread (blocking tests)."""
        return trio.from_thread.run(afn, *args, trio_token=self.token)

    async def _handle(self, stream: trio.SocketStream) -> None:
        link = Link(stream)
        self.links.append(link)
        try:
            while data := await stream.receive_some(65536):
                for message in link.conn.receive_data(data):
                    self.received.append(message)
                    if not await self._answer(link, message):
                        return
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            await stream.aclose()

    async def _answer(self, link: Link, message: Message) -> bool:
        """Answer ``message``; False once the client has closed its side."""
        match message:
            case Hello() if self.answer_hello:
                await link.send(self.refuse or Welcome(PROTOCOL_VERSION, "fake"))
                if self.stall:
                    await trio.sleep_forever()
                if self.read_gate is not None:
                    await self.read_gate.wait()
            case Subscribe(sub_id=sub_id, filter=wire):
                link.subs[sub_id] = Filter.from_wire(wire)
                if self.early is not None:
                    await link.send(Deliver([sub_id], "early:1", "early", self.early, [], 0))
                await link.send(SubAck(sub_id))
            case Unsubscribe(sub_id=sub_id):
                link.subs.pop(sub_id, None)
                await link.send(UnsubAck(sub_id))
            case Publish(attributes=attributes):
                ids = [i for i, f in link.subs.items() if f.matches(attributes)]
                if ids:
                    self.delivered.append(message.to_deliver(ids))
                    await link.send(self.delivered[-1])
            case Flush(token=token):
                self.flush_seen.set()
                if self.flush_gate is not None:
                    await self.flush_gate.wait()
                await link.send(FlushAck(token))
            case StatsRequest():
                await link.send(Stats({"subscriptions": len(link.subs)}))
            case Ping(nonce=nonce):
                await link.send(Pong(nonce))
            case Bye():
                await link.send(Bye("bye"))
                return False
            case Error():
                return False
        return True


@contextmanager
def fake_broker_thread() -> Iterator[FakeBroker]:
    """A fake broker running in a trio loop of its own thread, stopped on leaving."""
    fake = FakeBroker()
    ready: queue.SimpleQueue[trio.CancelScope] = queue.SimpleQueue()

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await fake.start(nursery)
            fake.token = trio.lowlevel.current_trio_token()
            ready.put(nursery.cancel_scope)

    thread = threading.Thread(target=trio.run, args=(main,), daemon=True)
    thread.start()
    scope = ready.get(timeout=5)
    try:
        yield fake
    finally:
        trio.from_thread.run_sync(scope.cancel, trio_token=fake.token)
        thread.join(timeout=5)
    assert not thread.is_alive()
