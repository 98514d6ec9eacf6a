"""Client library of the broker network: publish, subscribe, unsubscribe (docs/design.md).

Blocking, for scripts and notebooks::

    import client

    with client.Client.connect("127.0.0.1", 7108, name="sub-1") as c:
        sub = c.subscribe("family = 7 and price < 120.5")
        c.publish({"type": "callForOffers", "family": 7, "price": 99.0})
        event = sub.next(timeout=1.0)  # the attributes dict; TimeoutError if none comes
        c.unsubscribe(sub)

Trio (asyncio: ``client.open_asyncio_client``, the same calls)::

    async with client.open_client("127.0.0.1", 7108, name="sub-1") as c:
        sub = await c.subscribe("family = 7")
        await c.publish({"family": 7})
        async for event in sub:
            ...

``subscribe(filter, handler=fn)`` hands each delivery to ``fn(delivery)`` in the
client's I/O task (trio), as it is read (asyncio) or in its I/O thread (blocking)
instead of a queue, as gmqtt's and paho-mqtt's ``on_message`` do.

``subscribe`` returns once the subscription is in force everywhere; ``publish``
returns once the event is handed to the connection, and ``flush`` waits until the
broker has accepted everything published before. ``publish_many(events)`` publishes
several in order, every one checked before any is sent. Subscription queues are unbounded:
the application must consume what it subscribes to.
"""

from typing import TYPE_CHECKING

from client.aio import AsyncClient, AsyncSubscription, Reconnect, open_client
from client.blocking import Client, Subscription
from client.errors import (
    BrokerError,
    ClientClosed,
    ClientError,
    ConnectionLost,
    SubscriptionClosed,
)
from client.events import Delivery

if TYPE_CHECKING:
    from client.asyncio_client import AsyncioClient, AsyncioSubscription, open_asyncio_client

_ASYNCIO = ("AsyncioClient", "AsyncioSubscription", "open_asyncio_client")


def __getattr__(name: str) -> object:
    """The asyncio client's names, loaded (with asyncio) when first used: ``hop pub``
    and the other trio programs start without it."""
    if name in _ASYNCIO:
        from client import asyncio_client

        return getattr(asyncio_client, name)
    raise AttributeError(f"module 'client' has no attribute {name!r}")


__all__ = [
    "AsyncClient",
    "AsyncioClient",
    "AsyncioSubscription",
    "AsyncSubscription",
    "BrokerError",
    "Client",
    "ClientClosed",
    "ClientError",
    "ConnectionLost",
    "Delivery",
    "Reconnect",
    "Subscription",
    "SubscriptionClosed",
    "open_asyncio_client",
    "open_client",
]
