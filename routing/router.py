"""The routing state machine of one broker: every routing decision, and no I/O.

The broker feeds it what arrives on its links (subscriptions, unsubscriptions,
acknowledgements, events) and performs the actions it returns. Links are opaque
hashable ids chosen by the broker; the router only needs to know which links lead
to brokers (and which of them is the parent) and which to local clients.

Strategies (a topology file's ``routing`` key):

* ``hierarchical`` (SIENA's): subscriptions travel towards the root only; every
  event goes to the parent (unless it came from there) and to each child or client
  with a matching subscription, never back to the broker it came from. A client
  does receive its own publications when it subscribed to them.
* ``acyclic``: the same tree used peer to peer; subscriptions travel to every
  neighbouring broker, so events go only towards interested subscribers.
* ``flooding``: subscriptions stay local; events go to every neighbouring broker
  and to local clients with a matching subscription (a baseline).

In ``hierarchical`` and ``flooding`` routing the parent is in every decision for an
event that did not come from it, even while its link is down: the broker then
knows the event missed it (and counts and traces it as dropped).

Subscription forwarding is pruned by covering. For each neighbour N the router
keeps the *demand* (distinct filters of all subscriptions that must be served
through N, with the keys holding each) and the *forwarded* set, one entry per
filter actually sent to N, such that every demanded filter is covered by a
forwarded one. Removing the last holder of a forwarded filter re-forwards the
filters it alone covered *before* withdrawing it, so there is no gap in delivery.

A subscription is acknowledged to its sender once every forwarded entry it relies
on has been acknowledged by the neighbour it was sent to, so a client's
`subscribe` returns only when the subscription is in force everywhere it must be.
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from routing.cover_index import CoverIndex
from routing.covering import covers
from routing.filters import Filter
from routing.index import MatchIndex

STRATEGIES = ("hierarchical", "acyclic", "flooding")

Link = Hashable
SubKey = tuple[Link, int]  # (link it came from, the sender's subscription id)


@dataclass(frozen=True, slots=True)
class SendSubscribe:
    link: Link
    sub_id: int
    filter: Filter


@dataclass(frozen=True, slots=True)
class SendUnsubscribe:
    link: Link
    sub_id: int


@dataclass(frozen=True, slots=True)
class SendSubAck:
    link: Link
    sub_id: int


Action = SendSubscribe | SendUnsubscribe | SendSubAck


@dataclass(slots=True)
class Decision:
    """Where one event goes: brokers to forward to, clients with their matching ids."""

    forward: list[Link]
    deliver: dict[Link, list[int]]
    filters_matched: int


@dataclass(slots=True)
class _Forwarded:
    """A filter sent to one neighbour under our own subscription id."""

    sub_id: int
    filter: Filter
    acked: bool = False
    waiters: set[SubKey] = field(default_factory=set)


class _Neighbour:
    """Demand towards one neighbouring broker and what was forwarded to it."""

    __slots__ = ("demand", "demand_index", "forwarded", "forwarded_index", "by_id", "sent")

    def __init__(self) -> None:
        self.demand: dict[Filter, set[SubKey]] = {}
        self.demand_index = CoverIndex()
        self.forwarded: dict[Filter, _Forwarded] = {}
        self.forwarded_index = CoverIndex()
        self.by_id: dict[int, _Forwarded] = {}
        self.sent = 0  # subscriptions sent over the life of the link

    def add(self, target: Link, entry: _Forwarded) -> SendSubscribe:
        """Record `entry` as forwarded and return the message that forwards it."""
        self.remember(entry)
        self.by_id[entry.sub_id] = entry
        self.sent += 1
        return SendSubscribe(target, entry.sub_id, entry.filter)

    def remember(self, entry: _Forwarded) -> None:
        self.forwarded[entry.filter] = entry
        self.forwarded_index.add(entry.filter)

    def forget(self, entry: _Forwarded) -> None:
        del self.forwarded[entry.filter]
        self.forwarded_index.discard(entry.filter)

    def add_demand(self, f: Filter, key: SubKey) -> None:
        self.demand.setdefault(f, set()).add(key)
        self.demand_index.add(f)

    def covering(self, f: Filter) -> _Forwarded | None:
        """A forwarded entry covering `f` (an equal one first), if any."""
        entry = self.forwarded.get(f)
        if entry is not None:
            return entry
        names = f.attributes()
        for g in self.forwarded_index.may_cover(f):
            if g.attributes() <= names and covers(g, f):
                return self.forwarded[g]
        return None


class Router:
    """Routing tables and decisions of one broker."""

    def __init__(self, strategy: str = "hierarchical", parent: Link | None = None) -> None:
        if strategy not in STRATEGIES:
            raise ValueError(f"unknown routing strategy {strategy!r}; use one of {STRATEGIES}")
        self._strategy = strategy
        # Per event, `route` reads these instead of comparing the strategy's name.
        self._floods = strategy == "flooding"
        self._up_always = strategy != "acyclic"  # every event also goes to the parent
        self.parent = parent
        self._brokers: set[Link] = set()
        self._clients: set[Link] = set()
        self._subscriptions: dict[SubKey, Filter] = {}
        self._index: MatchIndex[SubKey] = MatchIndex()
        self._neighbours: dict[Link, _Neighbour] = {}
        self._pending: dict[SubKey, set[tuple[Link, int]]] = {}
        self._ids = itertools.count(1)

    # -- links ----------------------------------------------------------------------

    @property
    def strategy(self) -> str:
        """One of STRATEGIES, fixed when the router is made (`route` reads flags of it)."""
        return self._strategy

    def add_broker(self, link: Link) -> list[Action]:
        """A neighbouring broker (the parent or a child) is connected."""
        self._brokers.add(link)
        if not self._forwards_to(link):
            return []
        neighbour = self._neighbours.setdefault(link, _Neighbour())
        actions: list[Action] = []
        for key, f in self._subscriptions.items():
            if key[0] != link:
                actions += self._demand(neighbour, link, key, f, acknowledge=False)
        return actions

    def add_client(self, link: Link) -> None:
        self._clients.add(link)

    def remove_link(self, link: Link) -> list[Action]:
        """A link is gone: drop its subscriptions and what was forwarded to it."""
        actions: list[Action] = []
        for key in [k for k in self._subscriptions if k[0] == link]:
            actions += self.unsubscribe(link, key[1])
        neighbour = self._neighbours.pop(link, None)
        if neighbour is not None:
            for entry in neighbour.by_id.values():
                for waiter in entry.waiters:
                    actions += self._resolve(waiter, (link, entry.sub_id))
        self._brokers.discard(link)
        self._clients.discard(link)
        return actions

    def _forwards_to(self, link: Link) -> bool:
        """Whether subscriptions are forwarded over the broker link `link`."""
        if self.strategy == "hierarchical":
            return link == self.parent
        return self.strategy == "acyclic"

    # -- subscriptions ----------------------------------------------------------------

    def subscribe(self, link: Link, sub_id: int, f: Filter) -> list[Action]:
        """`link` subscribes with its id `sub_id`; resubscribing an id replaces it."""
        key = (link, sub_id)
        actions: list[Action] = []
        if key in self._subscriptions:
            actions += self.unsubscribe(link, sub_id)
        self._subscriptions[key] = f
        self._index.add(key, f)
        self._pending[key] = set()
        for target, neighbour in self._neighbours.items():
            if target != link:
                actions += self._demand(neighbour, target, key, f, acknowledge=True)
        if not self._pending[key]:
            del self._pending[key]
            actions.append(SendSubAck(link, sub_id))
        return actions

    def _demand(
        self, neighbour: _Neighbour, target: Link, key: SubKey, f: Filter, acknowledge: bool
    ) -> list[Action]:
        """Add `key`'s filter to the demand towards `target`; forward it if uncovered."""
        neighbour.add_demand(f, key)
        entry = neighbour.covering(f)
        actions: list[Action] = []
        if entry is None:
            entry = _Forwarded(next(self._ids), f)
            # Withdraw what the new entry covers, after sending it (no gap).
            covered = [
                neighbour.forwarded[g]
                for g in neighbour.forwarded_index.may_be_covered_by(f)
                if covers(f, g)
            ]
            actions.append(neighbour.add(target, entry))
            for old in covered:
                actions += self._withdraw(neighbour, target, old, successor=entry)
        if acknowledge and not entry.acked:
            entry.waiters.add(key)
            self._pending[key].add((target, entry.sub_id))
        return actions

    def unsubscribe(self, link: Link, sub_id: int) -> list[Action]:
        """Remove a subscription; unknown ids are ignored (the result is the same)."""
        key = (link, sub_id)
        f = self._subscriptions.pop(key, None)
        if f is None:
            return []
        self._index.remove(key)
        self._pending.pop(key, None)
        actions: list[Action] = []
        for target, neighbour in self._neighbours.items():
            holders = neighbour.demand.get(f)
            if holders is None or key not in holders:
                continue
            holders.discard(key)
            for entry in neighbour.by_id.values():
                entry.waiters.discard(key)
            if not holders:
                del neighbour.demand[f]
                neighbour.demand_index.discard(f)
                gone = neighbour.forwarded.get(f)
                if gone is not None:
                    actions += self._reforward_uncovered(neighbour, target, gone)
        return actions

    def _reforward_uncovered(
        self, neighbour: _Neighbour, target: Link, gone: _Forwarded
    ) -> list[Action]:
        """`gone` lost its last holder: forward what only it covered, then withdraw it."""
        neighbour.forget(gone)
        uncovered = [
            g
            for g in neighbour.demand_index.may_be_covered_by(gone.filter)
            if covers(gone.filter, g) and neighbour.covering(g) is None
        ]
        # Forward only the widest of them: the others are covered by those.
        roots = [
            g
            for g in uncovered
            if not any(h != g and covers(h, g) and not covers(g, h) for h in uncovered)
        ]
        actions: list[Action] = []
        for g in roots:
            if neighbour.covering(g) is not None:  # equal filters: the first is enough
                continue
            actions.append(neighbour.add(target, _Forwarded(next(self._ids), g)))
        neighbour.remember(gone)  # _withdraw removes it again
        actions += self._withdraw(neighbour, target, gone, successor=None)
        return actions

    def _withdraw(
        self,
        neighbour: _Neighbour,
        target: Link,
        entry: _Forwarded,
        successor: _Forwarded | None,
    ) -> list[Action]:
        """Stop forwarding `entry`; its waiters now wait for what covers them instead."""
        neighbour.forget(entry)
        del neighbour.by_id[entry.sub_id]
        actions: list[Action] = [SendUnsubscribe(target, entry.sub_id)]
        for waiter in entry.waiters:
            pending = self._pending.get(waiter)
            if pending is None:
                continue
            pending.discard((target, entry.sub_id))
            f = self._subscriptions[waiter]
            cover = successor if successor is not None else neighbour.covering(f)
            if cover is not None and not cover.acked:
                cover.waiters.add(waiter)
                pending.add((target, cover.sub_id))
            elif not pending:
                del self._pending[waiter]
                actions.append(SendSubAck(*waiter))
        return actions

    def sub_acked(self, link: Link, sub_id: int) -> list[Action]:
        """The neighbour `link` acknowledged our forwarded subscription `sub_id`."""
        neighbour = self._neighbours.get(link)
        entry = neighbour.by_id.get(sub_id) if neighbour else None
        if entry is None or entry.acked:
            return []
        entry.acked = True
        actions: list[Action] = []
        for waiter in entry.waiters:
            actions += self._resolve(waiter, (link, sub_id))
        entry.waiters.clear()
        return actions

    def _resolve(self, waiter: SubKey, done: tuple[Link, int]) -> list[Action]:
        pending = self._pending.get(waiter)
        if pending is None:
            return []
        pending.discard(done)
        if pending:
            return []
        del self._pending[waiter]
        return [SendSubAck(*waiter)]

    # -- events -----------------------------------------------------------------------

    def route(self, source: Link | None, event: Mapping[str, Any]) -> Decision:
        """Where an event that arrived over `source` (None: published here) goes."""
        matched = self._index.match_valid(event)
        forward: set[Link] = set()
        deliver: dict[Link, list[int]] = {}
        clients = self._clients
        for link, sub_id in matched:
            if link in clients:  # a client also gets what it published itself
                ids = deliver.get(link)
                if ids is None:
                    deliver[link] = [sub_id]
                else:
                    ids.append(sub_id)
            elif link != source:
                forward.add(link)
        if self._floods:
            forward = {b for b in self._brokers if b != source}
        parent = self.parent
        if parent is not None and self._up_always and source != parent:
            # Also while the parent link is down, so the broker sees the event is lost.
            forward.add(parent)
        ordered = sorted(forward, key=str) if len(forward) > 1 else [*forward]
        return Decision(ordered, deliver, len(matched))

    # -- introspection ----------------------------------------------------------------

    @property
    def subscription_count(self) -> int:
        return len(self._subscriptions)

    def subscriptions(self) -> Iterable[tuple[SubKey, Filter]]:
        return self._subscriptions.items()

    def forwarded(self, link: Link) -> list[tuple[int, Filter]]:
        """The subscriptions currently forwarded to the neighbour `link`."""
        neighbour = self._neighbours.get(link)
        if neighbour is None:
            return []
        return [(e.sub_id, e.filter) for e in neighbour.by_id.values()]

    def stats(self) -> dict[str, Any]:
        return {
            "strategy": self.strategy,
            "subscriptions": len(self._subscriptions),
            "clients": len(self._clients),
            "brokers": len(self._brokers),
            "forwarded": {str(link): len(n.by_id) for link, n in self._neighbours.items()},
            "forwarded_total": {str(link): n.sent for link, n in self._neighbours.items()},
            "pending_acks": len(self._pending),
        }
