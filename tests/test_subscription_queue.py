"""An AsyncSubscription's queue of deliveries, without a connection: order, batches,
waiting, the end after what was queued, and checkpoints like trio's channels."""

from __future__ import annotations

import time

import pytest
import trio
import trio.testing

from client.aio import AsyncSubscription
from client.errors import ConnectionLost, SubscriptionClosed
from client.events import Delivery, delivery_of
from routing import parse_filter


class _NoConnection:
    """The subscription's client, without a connection: consumers wait for `_put`."""

    _handlers = False

    async def _read_for(self, queue: object) -> bool:
        return False


def _sub() -> AsyncSubscription:
    return AsyncSubscription(_NoConnection(), 1, parse_filter("n exists"))  # type: ignore[arg-type]


def _delivery(n: int) -> Delivery:
    return delivery_of([1], f"e{n}", "pub", {"n": n}, ["1"], 100 + n)


def test_a_delivery_is_the_message_seen_by_the_client() -> None:
    """What the client's connection makes of a Deliver's fields (its build_deliver)."""
    before = time.time_ns()
    d = delivery_of([1, 4], "e", "p", {"n": 1}, ["1", "2"], 5)
    assert type(d) is Delivery
    assert (d.event_id, d.publisher, d.attributes, d.sub_ids, d.path) == (
        "e",
        "p",
        {"n": 1},
        (1, 4),
        ("1", "2"),
    )
    assert d.t_publish_ns == 5
    assert before <= d.t_deliver_ns <= time.time_ns()
    assert d == Delivery("e", "p", {"n": 1}, (1, 4), ("1", "2"), 5, d.t_deliver_ns)
    with pytest.raises(AttributeError):  # still frozen
        d.event_id = "x"  # type: ignore[misc]


def test_deliveries_come_in_order_and_batches_take_what_is_queued() -> None:
    async def main() -> None:
        sub = _sub()
        for n in range(5):
            sub._put(_delivery(n))
        assert (await sub.next_delivery()).event_id == "e0"
        assert [d.event_id for d in await sub.next_batch()] == ["e1", "e2", "e3", "e4"]

    trio.run(main)


def test_a_waiting_consumer_is_woken_and_the_end_comes_after_the_queue() -> None:
    async def main() -> None:
        sub = _sub()
        got: list[str] = []

        async def consume() -> None:
            with pytest.raises(ConnectionLost, match="gone"):  # a loss raises from the loop
                async for attributes in sub:
                    got.append(attributes["n"])

        async with trio.open_nursery() as nursery:
            nursery.start_soon(consume)
            await trio.testing.wait_all_tasks_blocked()
            sub._put(_delivery(0))
            await trio.testing.wait_all_tasks_blocked()
            assert got == [0]
            sub._put(_delivery(1))
            sub._close(ConnectionLost("gone"))
            sub._put(_delivery(2))  # after the end: not taken
        assert got == [0, 1]
        with pytest.raises(ConnectionLost, match="gone"):
            await sub.next_delivery()

    trio.run(main)


def test_unsubscribed_ends_with_subscription_closed() -> None:
    async def main() -> None:
        sub = _sub()
        sub._close(None)
        with pytest.raises(SubscriptionClosed):
            await sub.next_batch()

    trio.run(main)


def test_taking_a_queued_delivery_is_a_checkpoint() -> None:
    """A consumer that always finds deliveries queued still lets other tasks run, and
    is cancellable, as with trio's memory channels."""

    async def main() -> None:
        sub = _sub()
        for n in range(1000):
            sub._put(_delivery(n))
        other_ran = trio.Event()

        async def other() -> None:
            other_ran.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(other)
            for _ in range(100):  # trio may run a batch's tasks in either order
                await sub.next_delivery()
            assert other_ran.is_set()
        with trio.CancelScope() as scope:
            scope.cancel()
            await sub.next_delivery()
        assert scope.cancelled_caught
        assert len(sub._queue) == 900  # the cancelled call took nothing

    trio.run(main)


def test_a_handed_off_subscription_gives_what_was_queued_first_then_the_end() -> None:
    """A consumer in another thread (the blocking client) gets, through its sink, the
    deliveries queued before the hand-off, then each new one, then None at the end."""
    sub = _sub()
    sub._put(_delivery(0))
    got: list[Delivery | None] = []
    sub._hand_off(got.append, lambda: got.append(None))
    sub._put(_delivery(1))
    assert [d.event_id for d in got if d is not None] == ["e0", "e1"]
    assert not sub._queue  # nothing left behind for next_delivery
    sub._close(ConnectionLost("gone"))
    assert got[-1] is None and len(got) == 3
    ended = _sub()
    ended._close(None)
    late: list[Delivery | None] = []
    # handed off after its end: the end at once
    ended._hand_off(late.append, lambda: late.append(None))
    assert late == [None]
