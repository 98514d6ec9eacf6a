"""A floor for the broker's latency: a process that speaks the broker's protocol to
our clients and does only as much of the broker's work as ``--work`` asks, run on
trio, on a plain `select.epoll` loop, or on a thread per connection that blocks in
``recv`` (no event loop at all).

It answers what a client needs answered (Hello, Subscribe, Unsubscribe, Flush, Ping;
Bye ends the connection) and gives every event to the most recent subscription made
on it: no validation beyond the protocol's, no queues. A read that is exactly one
whole Publish frame is spliced into that subscription's Deliver (`deliver_head` +
the rest of the payload); any other read is decoded and each Publish in it encoded
as a Deliver. Writes block until done, so it is meant for the latency setting (a
few hundred events a second), not for saturation. Having written events, it yields
the CPU (``os.sched_yield``), as the broker does after writing through at the end of
a short read (`broker.outgoing`): a subscriber woken on its CPU runs first.

``--work`` adds the broker's work back a step at a time, on spliced frames: ``none``
(no decoding, no matching), ``decode`` (the payload decoded with `msgpack.unpackb`,
then dropped), ``route`` (decoded, and routed by a `routing.Router` that holds every
subscription the relay was sent; the event goes to the newest subscription only if
the router's decision names it).

On threads, one lock serialises the relay's state, as a broker whose connections read
on threads of their own would guard its router.

Run: ``python -m bench.floor_relay --loop {trio,epoll,thread} --port PORT [--work WORK]``;
prints ``listening`` once it accepts connections; stopped by SIGTERM or SIGKILL, or by
SIGINT in an orderly way (its exit hooks run: `bench.timeline_probe` writes its notes).
"""

from __future__ import annotations

import argparse
import itertools
import os
import select
import signal
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import trio
from msgpack import unpackb

from broker.netio import receive_some, socket_fd
from broker.protocol import (
    PROTOCOL_VERSION,
    PUBLISH_HEAD,
    Bye,
    Connection,
    Flush,
    FlushAck,
    Hello,
    Ping,
    Pong,
    Publish,
    SubAck,
    Subscribe,
    UnsubAck,
    Unsubscribe,
    Welcome,
    deliver_head,
    encode_frame,
)
from routing import Filter
from routing.router import Router

HOST = "127.0.0.1"
READ_SIZE = 65536
Write = Callable[[bytes], object]
WORK = ("none", "decode", "route")


@dataclass
class Target:
    """The most recent subscription: where every event goes."""

    write: Write
    link: int  # its connection's number
    sub_id: int
    head: bytes  # `deliver_head([sub_id])`


@dataclass
class Relay:
    """The relay's state, shared by its connections."""

    work: str = "none"
    target: Target | None = None
    router: Router = field(default_factory=Router)

    def received(self, peer: Peer, data: bytes | bytearray) -> bool:
        """Act on one read of ``peer``'s; False once the connection is to end."""
        target = self.target
        if (
            target is not None
            and data[4:6] == PUBLISH_HEAD
            and int.from_bytes(data[:4], "big") == len(data) - 4
        ):  # one whole Publish frame: spliced
            if self.work != "none":
                wire = unpackb(memoryview(data)[4:], raw=False, strict_map_key=False)
                if self.work == "route" and not self._wanted(peer, wire[3], target):
                    return True
            size = len(data) - 6 + len(target.head)
            target.write(size.to_bytes(4, "big") + target.head + data[6:])
            os.sched_yield()
            return True
        conn = peer.conn
        answers: list[bytes] = []
        wrote = False
        for message in conn.receive_data(data):
            kind = type(message)
            if kind is Publish:
                target = self.target
                if target is not None and (
                    self.work != "route" or self._wanted(peer, message.attributes, target)
                ):
                    target.write(encode_frame(message.to_deliver([target.sub_id])))
                    wrote = True
            elif kind is Hello:
                answers.append(conn.send(Welcome(PROTOCOL_VERSION, "floor")))
                self.router.add_client(peer.link)
            elif kind is Subscribe:
                answers.append(conn.send(SubAck(message.sub_id)))
                if self.work == "route":
                    self.router.subscribe(
                        peer.link, message.sub_id, Filter.from_wire(message.filter)
                    )
                head = deliver_head([message.sub_id])
                self.target = Target(peer.write, peer.link, message.sub_id, head)
            elif kind is Unsubscribe:
                answers.append(conn.send(UnsubAck(message.sub_id)))
            elif kind is Flush:
                answers.append(conn.send(FlushAck(message.token)))
            elif kind is Ping:
                answers.append(conn.send(Pong(message.nonce)))
            elif kind is Bye:
                return False
        if answers:
            peer.write(b"".join(answers))
        if wrote:
            os.sched_yield()
        return True

    def _wanted(self, peer: Peer, attributes: dict[str, object], target: Target) -> bool:
        """Whether the router sends an event from ``peer`` to ``target``'s subscription."""
        sub_ids = self.router.route(peer.link, attributes).deliver.get(target.link)
        return sub_ids is not None and target.sub_id in sub_ids


_links = itertools.count(1)


@dataclass
class Peer:
    """One client connection: its number, protocol state and how to write to it."""

    write: Write
    link: int = field(default_factory=lambda: next(_links))
    conn: Connection = field(default_factory=lambda: Connection("acceptor"))


def write_all(fd: int) -> Write:
    """A write of all of a frame on the socket ``fd``, waiting for room if need be."""

    def write(data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(fd, view) :]
            except BlockingIOError:
                select.select([], [fd], [])

    return write


def run_epoll(port: int, work: str) -> None:
    """The relay on one `select.epoll` loop: wait, read, act, repeat."""
    listener = socket.create_server((HOST, port))
    poller = select.epoll()
    poller.register(listener.fileno(), select.EPOLLIN)
    relay = Relay(work)
    peers: dict[int, tuple[socket.socket, Peer]] = {}
    print("listening", flush=True)
    while True:
        for fd, _ in poller.poll():
            if fd == listener.fileno():
                sock, _ = listener.accept()
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                peers[sock.fileno()] = (sock, Peer(write_all(sock.fileno())))
                poller.register(sock.fileno(), select.EPOLLIN)
                continue
            sock, peer = peers[fd]
            try:
                data = os.read(fd, READ_SIZE)
            except ConnectionError:
                data = b""
            if not data or not relay.received(peer, data):
                poller.unregister(fd)
                del peers[fd]
                sock.close()


def run_threads(port: int, work: str) -> None:
    """The relay on a thread per connection: each blocks in ``recv``, so the kernel
    wakes the reading thread itself; the relay's state is handled under one lock."""
    listener = socket.create_server((HOST, port))
    relay = Relay(work)
    lock = threading.Lock()

    def serve(sock: socket.socket) -> None:
        peer = Peer(write_all(sock.fileno()))
        with sock:
            while True:
                try:
                    data = sock.recv(READ_SIZE)
                except ConnectionError:
                    return
                with lock:
                    if not data or not relay.received(peer, data):
                        return

    print("listening", flush=True)
    while True:
        sock, _ = listener.accept()
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=serve, args=(sock,), daemon=True).start()


def run_trio(port: int, work: str) -> None:
    """The relay on trio, reading as the broker does (`broker.netio.receive_some`)."""
    relay = Relay(work)

    async def serve(stream: trio.SocketStream) -> None:
        fd = socket_fd(stream)
        assert fd is not None
        peer = Peer(write_all(fd))
        drained = False
        try:
            while True:
                data = await receive_some(stream, fd, READ_SIZE, drained)
                if not data or not relay.received(peer, data):
                    return
                drained = len(data) < READ_SIZE
        except (OSError, trio.BrokenResourceError):
            return
        finally:
            await stream.aclose()

    async def main() -> None:
        listeners = await trio.open_tcp_listeners(port, host=HOST)
        print("listening", flush=True)
        await trio.serve_listeners(serve, listeners)

    trio.run(main)


LOOPS: dict[str, Callable[[int, str], None]] = {
    "trio": run_trio,
    "epoll": run_epoll,
    "thread": run_threads,
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loop", choices=LOOPS, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--work", choices=WORK, default="none", help="see the module doc")
    args = parser.parse_args(argv)
    # A process started in the background by a shell without job control (`make test &`
    # in a script) inherits SIGINT ignored, and then neither Python nor trio raise
    # KeyboardInterrupt: the orderly stop needs the default handler back.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        LOOPS[args.loop](args.port, args.work)
    except* KeyboardInterrupt:  # SIGINT (from trio, in a group): an orderly end
        pass


if __name__ == "__main__":
    main()
