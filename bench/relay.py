"""The `link` baseline: a trivial trio relay, run as its own process.

It speaks the broker's framing (a 4-byte big-endian length, then a msgpack payload)
and nothing else of the protocol: a client's first frame is its role, ``"pub"`` or
``"sub"``, answered by ``"ok"``. Every frame a publisher sends is decoded with msgpack,
re-encoded, and written to every subscriber connection: no matching, no validation,
no routing tables, so it is the limit a broker written the same way (trio + msgpack,
batched reads and writes) could reach. Frames read in one ``receive_some`` are
relayed with one ``send_all`` per subscriber; a slow subscriber holds up the
publisher (TCP backpressure), as in the broker.

``--upstream HOST:PORT`` makes a chain: the relay first subscribes to the upstream
relay and relays what it gets from it as if it were published here; it starts
listening only once that link is up, so when the last relay of a chain accepts
connections the whole chain is linked.

Run: ``python -m bench.relay --port PORT [--upstream HOST:PORT]``; stopped by SIGTERM.
"""

from __future__ import annotations

import argparse
import struct
from typing import Any

import msgpack
import trio

HOST = "127.0.0.1"
READ_SIZE = 65536
_HEADER = struct.Struct(">I")


def encode_frame(obj: Any) -> bytes:
    """One frame: the length prefix and the msgpack encoding of ``obj``."""
    payload = msgpack.packb(obj, use_bin_type=True)
    return _HEADER.pack(len(payload)) + payload


class FrameDecoder:
    """Bytes in, decoded msgpack objects of the complete frames out."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes | bytearray) -> list[Any]:
        buffer = self._buffer
        buffer += data
        out: list[Any] = []
        start, end = 0, len(buffer)
        unpackb = msgpack.unpackb
        with memoryview(buffer) as view:
            while end - start >= 4:
                (length,) = _HEADER.unpack_from(buffer, start)
                stop = start + 4 + length
                if stop > end:
                    break
                out.append(unpackb(view[start + 4 : stop], raw=False))
                start = stop
        del buffer[:start]
        return out


async def handshake(stream: trio.abc.Stream, role: str) -> FrameDecoder:
    """Declare ``role`` on a fresh connection and wait for ``"ok"``; the decoder returned
    holds whatever came after it."""
    await stream.send_all(encode_frame(role))
    decoder = FrameDecoder()
    while True:
        data = await stream.receive_some(READ_SIZE)
        if not data:
            raise ConnectionError("the relay closed the connection during the handshake")
        frames = decoder.feed(data)
        if frames:
            if frames != ["ok"]:
                raise ConnectionError(f"unexpected handshake answer {frames!r}")
            return decoder


class _Subscriber:
    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.lock = trio.Lock()  # several feeds may write to the same subscriber


class Relay:
    """Forwards every publisher frame to every subscriber."""

    def __init__(self) -> None:
        self.subscribers: list[_Subscriber] = []

    async def pump(self, stream: trio.abc.Stream, decoder: FrameDecoder) -> None:
        """Relay the frames of one feed (a publisher, or the upstream relay) until EOF."""
        pack = msgpack.Packer(use_bin_type=True).pack
        header = _HEADER.pack
        while data := await stream.receive_some(READ_SIZE):
            parts: list[bytes] = []
            for message in decoder.feed(data):
                payload = pack(message)
                parts += (header(len(payload)), payload)
            if not parts:
                continue
            chunk = b"".join(parts)
            for subscriber in list(self.subscribers):
                try:
                    async with subscriber.lock:
                        await subscriber.stream.send_all(chunk)
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    if subscriber in self.subscribers:
                        self.subscribers.remove(subscriber)

    async def serve_client(self, stream: trio.SocketStream) -> None:
        decoder = FrameDecoder()
        try:
            role: list[Any] = []
            while not role:
                data = await stream.receive_some(READ_SIZE)
                if not data:
                    return
                role = decoder.feed(data)
            if role[0] == "pub":
                await stream.send_all(encode_frame("ok"))
                await self.pump(stream, decoder)
            elif role[0] == "sub":
                subscriber = _Subscriber(stream)
                self.subscribers.append(subscriber)  # in force before the "ok"
                try:
                    async with subscriber.lock:
                        await stream.send_all(encode_frame("ok"))
                    while await stream.receive_some(READ_SIZE):
                        pass  # subscribers send nothing; wait for EOF
                finally:
                    if subscriber in self.subscribers:
                        self.subscribers.remove(subscriber)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        finally:
            await trio.aclose_forcefully(stream)


async def run(port: int, upstream: tuple[str, int] | None) -> None:
    relay = Relay()
    async with trio.open_nursery() as nursery:
        if upstream is not None:
            stream = await trio.open_tcp_stream(*upstream)
            decoder = await handshake(stream, "sub")
            nursery.start_soon(relay.pump, stream, decoder)
        listeners = await trio.open_tcp_listeners(port, host=HOST)
        nursery.start_soon(trio.serve_listeners, relay.serve_client, listeners)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", help="HOST:PORT of the relay to subscribe to")
    args = parser.parse_args(argv)
    upstream = None
    if args.upstream:
        host, _, port = args.upstream.rpartition(":")
        upstream = (host, int(port))
    trio.run(run, args.port, upstream)


if __name__ == "__main__":
    main()
