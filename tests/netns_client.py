"""A subscriber or publisher for tests/test_netns.py, run inside a network namespace
(``ip netns exec NS python -m tests.netns_client sub|pub HOST PORT``).

Both first wait (up to 30 s) until their broker is linked to its parent, then print
``ready``. ``sub`` subscribes to ``kind = "netns"`` and prints the ``seq`` of each
delivered event, one per line. ``pub`` reads sequence numbers from stdin, one per line,
publishes ``{"kind": "netns", "seq": N}`` for each, and prints ``sent N``.
"""

from __future__ import annotations

import sys
import time

import trio

import client
from broker.probe import fetch_stats
from broker.protocol import ProtocolError


def wait_linked(host: str, port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if fetch_stats(host, port, timeout=2.0)["parent_connected"]:
                return
        except (OSError, ProtocolError):
            pass
        if time.monotonic() > deadline:
            sys.exit(f"broker {host}:{port} did not link to its parent in {timeout} s")
        time.sleep(0.1)


async def subscribe(host: str, port: int) -> None:
    async with client.open_client(host, port, name="netns-sub") as c:
        sub = await c.subscribe('kind = "netns"')
        print("ready", flush=True)
        async for event in sub:
            print(event["seq"], flush=True)


async def publish(host: str, port: int) -> None:
    async with client.open_client(host, port, name="netns-pub") as c:
        print("ready", flush=True)
        while line := await trio.to_thread.run_sync(sys.stdin.readline):
            seq = int(line)
            await c.publish({"kind": "netns", "seq": seq})
            await c.flush()
            print(f"sent {seq}", flush=True)


def main() -> None:
    role, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    wait_linked(host, port)
    trio.run(subscribe if role == "sub" else publish, host, port)


if __name__ == "__main__":
    main()
