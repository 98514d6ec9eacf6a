"""One broker process: trio I/O around the pure `routing.Router`.

Each connection (client, child broker, or the link to the parent) has a reader task
that turns bytes into messages through the sans-I/O `Connection` and hands them to
the router, and a writer task that drains the link's bounded outgoing queue
(`broker.outgoing`) in batches (one `send_all` per wakeup). What a reader queues
while it handles one read is written through at the read's end, without waking the
writer, whenever the writer has nothing in flight.

Backpressure policy: every outgoing queue holds at most `queue_frames` frames. A
reader that must enqueue to a full queue waits, so it stops reading its own socket
and TCP pushes back on whoever sends to it: a slow subscriber slows the publishers
whose events it wants instead of growing the broker's memory. Control messages
(acks, subscriptions, stats) take the same path, so their order with events holds.

A link's `queue_depth` (stats) counts the frames in its queue plus the batch its
writer is sending, so it is bounded by `queue_frames + batch_frames`.

Queue policy for client links (`BrokerConfig.queue_policy`): `block` is the
backpressure above; `drop` never waits on a subscriber's full queue: the event is
dropped for that subscriber only, counted (the link's `events_dropped`, the broker's
`drops["queue-full"]`) and traced. Links between brokers always block, since
dropping there would silently cut whole subtrees off.

Stuck links: a write to a peer that makes no progress for `stuck_timeout_s` (the
peer stopped reading and the socket buffers are full) cuts that link, which frees
whoever was blocked on its queue.

Heartbeats: when nothing has been heard from a peer for `heartbeat_s`, it is sent a
Ping; a link whose peer has sent nothing at all (Pong or anything else) for
`heartbeat_timeout_s` is cut. Time spent not reading because of backpressure does
not count as silence, nor time the broker itself did not run (stopped, paused:
`broker.liveness`).

Drops and the trace: when a routing decision names a link that is not connected
(the parent link is down, a child or client went away), a client's full queue under
the `drop` policy, or a target the event's frame would reach over `max_frame` (its
path and a Deliver's sub ids grow it), the event's `hops` row has decision "dropped"
and its `drop_reason` lists every target that missed it, comma-separated, as
`link-down:LINK`, `queue-full:LINK` or `too-large:LINK` (LINK is `broker:N` or
`client:NAME#K`);
`to_nodes` and `delivered_to` still list the targets that did get it. An event that
already passed this broker is dropped whole with reason `cycle`. Cycles and events too
large are logged (`cycle_dropped`, `event_too_large`) the 1st, 2nd, 4th, 8th... time
only (`worth_logging`): a client can repeat them at will. Stats count
`events_dropped` (events missed by at least one target) and `drops` per reason.

Clean shutdown (`drain`, on SIGTERM): the broker stops accepting and stops reading,
sends every peer what is already queued for it followed by Bye, waits (at most
`drain_timeout_s`) for each peer to say Bye too or hang up, and the trace is flushed
on exit. So everything the broker accepted (routed, and acknowledged by a FlushAck
queued behind it) before the signal reaches the peers that were connected.

Bad input from a peer (malformed frames, oversized frames, wrong message types,
bad filters, messages over a client limit, a wrong secret) gets an `Error` message
naming the problem and that connection is closed; the broker and its other
connections carry on. Brokers listen on their topology address only, with TLS if the
topology asks for it (see `broker.security`).
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import random
import ssl
import time
from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog
import trio

from broker.liveness import overrun
from broker.logs import worth_logging
from broker.netio import connect_error, host_port, receive_some, socket_fd
from broker.outage import Outage
from broker.outgoing import Outgoing, OutQueue
from broker.protocol import (
    DEFAULT_MAX_FRAME,
    PROTOCOL_VERSION,
    Bye,
    Connection,
    Deliver,
    Error,
    Flush,
    FlushAck,
    Hello,
    Limits,
    Ping,
    Pong,
    ProtocolError,
    Publish,
    PublishArray,
    RoutedFrames,
    Stats,
    StatsRequest,
    SubAck,
    Subscribe,
    UnsubAck,
    Unsubscribe,
    Welcome,
    error_frame,
    frame_starts,
    join_frames,
)
from broker.security import ERR_AUTH, BrokerSecurity, secret_matches
from broker.trace.hop_trace import BLOCKED, DROPPED, EVENT_ROW, MARK, HopRecorder
from routing import Filter
from routing.router import (
    Action,
    Decision,
    Router,
    SendSubAck,
    SendSubscribe,
    SendUnsubscribe,
)
from topologies import Topology, TopologyError

log = structlog.get_logger("hop.broker")
pack_row = EVENT_ROW.pack
_now = time.time_ns  # one lookup less per traced event


READ_SIZE = 65536
_CLOSED = ("", "")  # the link ended without a problem to report
_CLOSED_IN_HANDSHAKE = "connection closed during the handshake"  # (a port probe, say)
HANDSHAKE_TIMEOUT_S = 10.0
QUEUE_POLICIES = ("block", "drop")
DROP_REASONS = ("cycle", "link-down", "queue-full", "too-large")
MIN_MAX_FRAME = 4096  # below it a broker's own stats reply may not fit
MAX_MAX_FRAME = 2**32 - 1  # the length prefix's range


@dataclass
class BrokerConfig:
    """Tunables of one broker (defaults suit a laptop)."""

    max_frame: int = DEFAULT_MAX_FRAME
    queue_frames: int = 4096
    batch_frames: int = 512
    reconnect_initial_s: float = 0.05
    reconnect_max_s: float = 2.0
    parent_warn_after_s: float = 5.0  # warn of a parent out of reach this long (broker.outage)
    trace_dir: Path | None = None  # record a `hops` row per event (broker.trace.schema)
    run_id: str = ""
    limits: Limits = field(default_factory=Limits)  # on what clients send
    security: BrokerSecurity = field(default_factory=BrokerSecurity)
    queue_policy: str = "block"  # client links with a full queue: "block" | "drop"
    stuck_timeout_s: float = 30.0  # cut a link whose writes make no progress (0: never)
    heartbeat_s: float = 5.0  # ping a peer quiet for this long (0: no heartbeats)
    heartbeat_timeout_s: float = 15.0  # cut a link whose peer was silent this long
    drain_timeout_s: float = 3.0  # at shutdown, time to send what is queued

    def __post_init__(self) -> None:
        """ValueError naming the field for a value the broker cannot work with (a queue
        of no frames would stall every link; a NaN or negative time would never or at
        once expire)."""
        if self.queue_policy not in QUEUE_POLICIES:
            raise ValueError(f"queue_policy must be one of {QUEUE_POLICIES}: {self.queue_policy!r}")
        if not MIN_MAX_FRAME <= self.max_frame <= MAX_MAX_FRAME:
            raise ValueError(
                f"max_frame must be {MIN_MAX_FRAME} to {MAX_MAX_FRAME} bytes, got {self.max_frame}"
            )
        for name in ("queue_frames", "batch_frames"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        for name in ("stuck_timeout_s", "heartbeat_s", "drain_timeout_s"):
            _check_seconds(name, getattr(self, name), zero_ok=True)
        _check_seconds("heartbeat_timeout_s", self.heartbeat_timeout_s, zero_ok=False)
        if self.heartbeat_s > 0 and self.heartbeat_timeout_s <= self.heartbeat_s:
            raise ValueError(
                f"heartbeat_timeout_s ({self.heartbeat_timeout_s:g}) must be longer than "
                f"heartbeat_s ({self.heartbeat_s:g})"
            )


def _check_seconds(name: str, value: float, zero_ok: bool) -> None:
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok):
        least = "0 or more" if zero_ok else "more than 0"
        raise ValueError(f"{name} must be a finite number of seconds, {least}, got {value}")


@dataclass
class LinkCounters:
    events_in: int = 0
    events_out: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    messages_in: int = 0
    messages_out: int = 0
    events_dropped: int = 0  # queue-full drops (the `drop` policy)


@dataclass(eq=False)
class Link:
    """One open connection and its outgoing queue."""

    link_id: str
    kind: str  # "client" | "broker"
    peer: str  # the broker id or the client's name
    stream: trio.abc.Stream
    conn: Connection
    queue: OutQueue
    counters: LinkCounters
    node: str = ""  # how traces name the peer: a broker id, or client:NAME
    # Tracing (broker.trace.hop_trace) of the read being handled: its events' values, notes
    # on what was not plain routing, and the CPU time spent on anything else than
    # routing (control messages, blocked sends).
    trace_rows: bytearray = field(default_factory=bytearray)
    trace_notes: list[Any] = field(default_factory=list)
    trace_outcome: int = 0  # the outcome code of events sent to this link alone
    untraced_cpu_ns: int = 0
    # Liveness (time.monotonic() seconds): the reader waits for data since `heard`
    # when `receiving` (a write in progress: `queue.send_started`).
    receiving: bool = False
    heard: float = 0.0
    pinged: float = 0.0
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)  # the whole link
    read_scope: trio.CancelScope = field(default_factory=trio.CancelScope)  # its reader
    writer_done: trio.Event = field(default_factory=trio.Event)
    problem: tuple[str, str] | None = None  # why the broker cut the link

    def __post_init__(self) -> None:
        self.node = self.peer if self.kind == "broker" else f"client:{self.peer}"

    @property
    def closed(self) -> bool:
        """The link is down or saying Bye: it takes no more frames."""
        return self.queue.closed

    def cut(self, code: str, why: str) -> None:
        """End the link from the broker's side; `code` and `why` go into the Error."""
        if self.problem is None:
            self.problem = (code, why)
        self.scope.cancel()


class Broker:
    """A broker of a topology: listens, links to its parent, routes."""

    def __init__(
        self,
        topology: Topology,
        broker_id: int,
        config: BrokerConfig | None = None,
        reread: Callable[[], Topology] | None = None,
    ) -> None:
        """`reread` reads the topology file again (TopologyError or OSError when it
        cannot): asked when a broker this one does not know as a child says Hello."""
        if broker_id not in topology.brokers:
            raise ValueError(f"broker {broker_id} is not in topology {topology.name!r}")
        self.topology = topology
        self.broker_id = broker_id
        self.name = str(broker_id)
        self.spec = topology.brokers[broker_id]
        self.config = config or BrokerConfig()
        self._frames = RoutedFrames(self.name, self.config.max_frame)  # what it routes
        parent = self.spec.parent
        self.parent_link_id = None if parent is None else f"broker:{parent}"
        self.parent_outage = Outage(self.config.parent_warn_after_s)  # while out of reach
        self.router = Router(topology.routing, parent=self.parent_link_id)
        self.children = set(topology.children(broker_id))
        self._reread = reread
        self._refused_rereads = 0  # files read again that could not add a child
        self.links: dict[Hashable, Link] = {}  # by link id, the router's key
        self.outgoing = Outgoing()
        self.started_ns = time.time_ns()
        self.events_routed = 0
        self.events_dropped = 0  # events that missed at least one target
        self.drops = dict.fromkeys(DROP_REASONS, 0)  # missed targets, by reason
        self.too_large_events = 0  # times an event was too large for targets (`_too_large`)
        self._drop_when_full = self.config.queue_policy == "drop"
        self._draining = False
        self._accepting = trio.CancelScope()
        self.tracer: HopRecorder | None = None
        if self.config.trace_dir is not None:
            self.tracer = HopRecorder(self.config.trace_dir, self.config.run_id, self.name)
        self._client_numbers = itertools.count(1)
        self._log = log.bind(broker=self.name)

    # -- running ------------------------------------------------------------------

    async def serve(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Listen and keep the parent link up until cancelled."""
        listeners: list[Any] = await trio.open_tcp_listeners(self.spec.port, host=self.spec.host)
        ssl_context = self.config.security.server_ssl
        if ssl_context is not None:
            listeners = [trio.SSLListener(listener, ssl_context) for listener in listeners]
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._listen, listeners, nursery)
                if self.spec.parent is not None:
                    nursery.start_soon(self._parent_loop)
                if self.tracer is not None:
                    nursery.start_soon(self._flush_traces, self.tracer)
                self._log.info("listening", host=self.spec.host, port=self.spec.port)
                task_status.started()
        finally:
            if self.tracer is not None:
                status = self.tracer.close()
                lost = self.tracer.rows_lost
                incomplete = lost > 0 or status != 0
                (self._log.error if incomplete else self._log.info)(
                    "trace_closed",
                    rows=self.tracer.rows_recorded,
                    written=self.tracer.rows_written,
                    lost=lost,
                    writer_status=status,
                )

    async def _listen(self, listeners: list[trio.SocketListener], nursery: trio.Nursery) -> None:
        """Accept connections until `drain`; the links live on in `nursery`."""
        try:
            with self._accepting:
                await trio.serve_listeners(self._accept, listeners, handler_nursery=nursery)
        finally:
            for listener in listeners:
                await trio.aclose_forcefully(listener)

    async def drain(self, timeout_s: float) -> None:
        """Prepare a clean shutdown: accept nothing more, stop reading, send every peer
        what is queued for it and then Bye. Returns once every link has closed, or
        after `timeout_s`; the caller then cancels `serve`, which flushes the trace."""
        self._draining = True
        self._accepting.cancel()
        for link in list(self.links.values()):
            link.read_scope.cancel()
        with trio.move_on_after(timeout_s):
            while self.links:
                await trio.sleep(0.01)
        self._log.info("drained", links_left=sorted(map(str, self.links)))

    async def _flush_traces(self, tracer: HopRecorder) -> None:
        """Write buffered trace rows at least once a second, also when idle."""
        while True:
            await trio.sleep(1.0)
            tracer.flush()

    async def _parent_loop(self) -> None:
        """Connect to the parent, and reconnect with jittered, capped backoff."""
        parent = self.spec.parent
        assert parent is not None and self.parent_link_id is not None
        host, port = self.topology.address(parent)
        delay = self.config.reconnect_initial_s
        while not self._draining:
            try:
                stream = await self._open_parent_stream(host, port)
            except OSError as exc:
                why = str(connect_error(f"broker {parent} at {host_port(host, port)}", exc))
                self._parent_failed("parent_unreachable", why)
                await trio.sleep(delay * random.uniform(0.5, 1.5))
                delay = min(delay * 2, self.config.reconnect_max_s)
                continue
            conn = Connection(
                "initiator",
                max_frame=self.config.max_frame,
                keep_frames=self.tracer is not None,
                keep_payloads=True,
                publish_arrays=True,
            )
            try:
                with trio.fail_after(HANDSHAKE_TIMEOUT_S):
                    secret = self.config.security.secret
                    hello = Hello(PROTOCOL_VERSION, "broker", self.name, secret)
                    await stream.send_all(conn.send(hello))
                    welcome, leftover = await _read_one(stream, conn)
                if isinstance(welcome, Error):
                    raise ProtocolError(welcome.code, f"the parent refused it: {welcome.message}")
                if not isinstance(welcome, Welcome):
                    raise ProtocolError("unexpected", f"parent answered {welcome!r}")
            except (OSError, trio.BrokenResourceError, trio.TooSlowError, ProtocolError) as exc:
                why = (
                    f"the handshake with broker {parent} at {host_port(host, port)} "
                    f"failed: {_failure(exc)}"
                )
                self._parent_failed("parent_handshake_failed", why, at_once=True)
                await trio.aclose_forcefully(stream)  # TLS: aclose would retry the handshake
                await trio.sleep(delay * random.uniform(0.5, 1.5))
                delay = min(delay * 2, self.config.reconnect_max_s)
                continue
            delay = self.config.reconnect_initial_s
            unreachable_s = self.parent_outage.ended(time.monotonic())
            if unreachable_s is None:
                self._log.info("parent_connected", parent=parent)
            else:
                self._log.info("parent_connected", parent=parent, after_s=round(unreachable_s, 1))
            await self._run_link(self.parent_link_id, "broker", str(parent), stream, conn, leftover)
            self._log.warning("parent_lost", parent=parent)

    def _parent_failed(self, event: str, why: str, at_once: bool = False) -> None:
        """Note a failed attempt to link to the parent; warn as `broker.outage` says."""
        now = time.monotonic()
        outage = self.parent_outage
        if outage.failed(now, why, at_once):
            self._log.warning(
                event,
                parent=self.spec.parent,
                error=why,
                attempts=outage.attempts,
                for_s=round(outage.lasted(now), 1),
            )

    async def _open_parent_stream(self, host: str, port: int) -> trio.abc.Stream:
        """A TCP stream to the parent, in TLS if configured (the TLS handshake happens
        with the first send, within the handshake timeout)."""
        stream = await trio.open_tcp_stream(host, port)
        ssl_context = self.config.security.parent_ssl
        if ssl_context is None:
            return stream
        return trio.SSLStream(stream, ssl_context, server_hostname=host)

    async def _accept(self, stream: trio.abc.Stream) -> None:
        """Serve one accepted connection; nothing a peer does may stop the broker."""
        try:
            await self._accept_link(stream)
        except Exception:
            self._log.exception("connection_failed")
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(stream)

    async def _accept_link(self, stream: trio.abc.Stream) -> None:
        conn = Connection(
            "acceptor",
            max_frame=self.config.max_frame,
            limits=self.config.limits,
            keep_frames=self.tracer is not None,
            keep_payloads=True,
            publish_arrays=True,
        )
        try:
            with trio.fail_after(HANDSHAKE_TIMEOUT_S):
                hello, leftover = await _read_one(stream, conn)
            if not isinstance(hello, Hello):  # Bye or Error instead of Hello
                await stream.aclose()
                return
            link_id, kind = self._admit(hello)
            await stream.send_all(conn.send(Welcome(PROTOCOL_VERSION, self.name)))
        except ProtocolError as exc:
            if exc.code != ERR_AUTH and exc.message != _CLOSED_IN_HANDSHAKE:  # (auth: logged)
                self._log.warning("handshake_refused", code=exc.code, error=exc.message)
            await _refuse(stream, exc.code, exc.message)
            return
        except (
            trio.TooSlowError,
            trio.BrokenResourceError,
            trio.ClosedResourceError,
            OSError,
        ) as exc:
            if _tls_refusal(exc):
                self._log.warning("tls_refused", error=_failure(exc))
            await trio.aclose_forcefully(stream)  # TLS: aclose would wait for the handshake
            return
        await self._run_link(link_id, kind, hello.node_id, stream, conn, leftover)

    def _admit(self, hello: Hello) -> tuple[str, str]:
        """The link id for a peer that said Hello, or ProtocolError to refuse it."""
        required = self.config.security.required_secret(hello.role)
        if required is not None and not secret_matches(hello.secret, required):
            self._log.warning("auth_refused", role=hello.role, peer=hello.node_id)
            raise ProtocolError(ERR_AUTH, "authentication failed")
        if hello.role == "client":
            return f"client:{hello.node_id}#{next(self._client_numbers)}", "client"
        try:
            child = int(hello.node_id)
        except ValueError:
            child = -1
        if child not in self.children and not self._added_child(child):
            raise ProtocolError(
                "unexpected", f"broker {hello.node_id!r} is not a child of broker {self.name}"
            )
        link_id = f"broker:{child}"
        if link_id in self.links:
            raise ProtocolError("unexpected", f"broker {child} is already connected")
        return link_id, "broker"

    def _added_child(self, child: int) -> bool:
        """Whether the topology file, read again, lists `child` as this broker's child: a
        broker added to a running network (the file edited where this broker runs, then
        the new broker started). Only that is taken from the file; when this broker's
        own entry (its address, its parent) differs there, nothing is, as that takes a
        restart."""
        if self._reread is None or child < 0:
            return False
        try:
            topology = self._reread()
        except (TopologyError, OSError) as exc:
            self._refused_rereads += 1  # (the child retries: logged 1st, 2nd, 4th...)
            if worth_logging(self._refused_rereads):
                self._log.warning("topology_unreadable", child=child, error=str(exc))
            return False
        if child not in topology.children(self.broker_id):
            return False
        if topology.brokers.get(self.broker_id) != self.spec:
            self._refused_rereads += 1
            if worth_logging(self._refused_rereads):
                why = "this broker's own entry differs: restart it"
                self._log.warning("topology_changed", child=child, why=why)
            return False
        self.children.add(child)
        self._log.info("child_added", child=child)
        return True

    async def _run_link(
        self,
        link_id: str,
        kind: str,
        peer: str,
        stream: trio.abc.Stream,
        conn: Connection,
        leftover: list[Any],
    ) -> None:
        counters = LinkCounters()
        queue = OutQueue(
            self.config.queue_frames,
            self.config.batch_frames,
            self.outgoing,
            counters,
            socket_fd(stream),
            join_frames if kind == "client" else b"".join,  # Deliveries frames to clients
        )
        link = Link(link_id, kind, peer, stream, conn, queue, counters)
        self.links[link_id] = link
        if self.tracer is not None:
            self.tracer.name_link(link_id, link.node if kind == "broker" else peer, kind)
            link.trace_outcome = self.tracer.outcome_of((link_id,))
        self._log.info("link_up", link=link_id)
        problem: tuple[str, str] | None = None
        try:
            with link.scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._writer, link)
                    nursery.start_soon(self._watch, link)
                    if kind == "broker":
                        await self._perform(self.router.add_broker(link_id))
                    else:
                        self.router.add_client(link_id)
                    problem = await self._read_link(link, leftover)
                    if problem is None and self._draining:
                        await self._finish(link)
                    nursery.cancel_scope.cancel()
        finally:
            problem = link.problem or problem
            del self.links[link_id]
            link.queue.close()  # readers blocked on this full queue give up
            # The router forgets the link at once: a reconnecting peer reuses its id.
            actions = self.router.remove_link(link_id)
            with trio.CancelScope(shield=True), trio.move_on_after(5.0):
                if problem is not None and problem[0]:
                    self._log.warning(
                        "closing_link", link=link_id, code=problem[0], error=problem[1]
                    )
                    await _refuse(stream, *problem)
                await stream.aclose()
                await self._perform(actions)
            self._log.info("link_down", link=link_id)

    async def _read_link(self, link: Link, leftover: list[Any]) -> tuple[str, str] | None:
        """Handle what came with the handshake, then read until the link ends or the
        broker drains (None then); return why the link must close."""
        problem = None
        with link.read_scope:
            if self._draining:
                link.read_scope.cancel()
            if leftover:  # messages that came in the handshake's read
                frames: bytes | bytearray = b""
                if self.tracer is not None:  # theirs: the read's frames but the first
                    received = link.conn.received_frames
                    frames = received[frame_starts(received)[1] :]
                payloads = link.conn.received_payloads[1:]
                problem = await self._handle_read(
                    link, leftover, payloads, frames, time.time_ns(), 0
                )
            if problem is None:
                problem = await self._reader(link)
        return problem

    async def _finish(self, link: Link) -> None:
        """Draining: send what is queued, then Bye, and read until the peer says Bye or
        hangs up (closing a socket with unread input resets it, which can destroy what
        was sent). What the peer sends meanwhile is decoded only to find its Bye: a TLS
        stream cannot half-close, so a draining peer broker's end of stream never comes
        before this side closes."""
        conn = link.conn
        try:
            frame = conn.send(Bye("broker shutting down"))
        except ProtocolError:  # this side already said Bye or Error
            frame = b""
        with contextlib.suppress(
            trio.BrokenResourceError, trio.ClosedResourceError, OSError, ProtocolError
        ):
            await link.queue.end(frame)  # nothing may be queued behind the Bye
            await link.writer_done.wait()
            while not conn.peer_closed and (data := await link.stream.receive_some(READ_SIZE)):
                conn.receive_data(data)

    async def _watch(self, link: Link) -> None:
        """Heartbeats and stuck-write detection of one link (see the module doc)."""
        config = self.config
        periods = [p for p in (config.heartbeat_s, config.stuck_timeout_s) if p > 0]
        if not periods:
            return
        nonces = itertools.count(1)
        period = min(periods) / 2
        while True:
            slept_from = time.monotonic()
            await trio.sleep(period)
            now = time.monotonic()
            paused = overrun(slept_from, period, now)  # this broker's own (broker.liveness)
            link.heard += paused
            if link.queue.send_started:
                link.queue.send_started += paused
            problem = self._liveness_problem(link, now)
            if problem is not None:
                link.cut(*problem)
                return
            if link.receiving and not link.closed and self._due_ping(link, time.monotonic()):
                link.queue.put_nowait(link.conn.send(Ping(next(nonces))))

    def _liveness_problem(self, link: Link, now: float) -> tuple[str, str] | None:
        config = self.config
        stuck = config.stuck_timeout_s
        started = link.queue.send_started
        if stuck > 0 and started and now - started > stuck:
            return ("stuck", f"no progress writing to the peer for {stuck} s")
        if config.heartbeat_s > 0 and link.receiving:
            silent = now - link.heard
            if silent > config.heartbeat_timeout_s:
                return ("timeout", f"nothing heard from the peer for {silent:.1f} s")
        return None

    def _due_ping(self, link: Link, now: float) -> bool:
        """Whether the quiet peer of `link` should be pinged now (at most once a period)."""
        period = self.config.heartbeat_s
        if period <= 0 or now - link.heard < period or now - link.pinged < period:
            return False
        link.pinged = now
        return True

    async def _reader(self, link: Link) -> tuple[str, str] | None:
        """Read and handle messages until the link ends; return why it must close."""
        stream, conn, counters = link.stream, link.conn, link.counters
        fd = link.queue.fd
        drained = False
        while True:
            link.heard = time.monotonic()
            link.receiving = True
            try:
                data = await receive_some(stream, fd, READ_SIZE, drained)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                return _CLOSED
            finally:
                link.receiving = False
            if not data:
                return _CLOSED
            drained = len(data) < READ_SIZE
            t_read, cpu_read = (time.time_ns(), time.thread_time_ns()) if self.tracer else (0, 0)
            counters.bytes_in += len(data)
            try:
                messages = conn.receive_data(data)
            except ProtocolError as exc:
                return (exc.code, exc.message)
            problem = await self._handle_read(
                link, messages, conn.received_payloads, conn.received_frames, t_read, cpu_read
            )
            if problem is not None:
                return problem

    async def _handle_read(
        self,
        link: Link,
        messages: list[Any],
        payloads: list[bytes],
        frames: bytes | bytearray,
        t_read: int,
        cpu_read: int,
    ) -> tuple[str, str] | None:
        """Handle the messages of one read, decoded from `payloads`, whose `frames` came
        at `t_read`, when this thread's CPU clock read `cpu_read` (b"", 0 and 0 when not
        tracing)."""
        counters = link.counters
        problem = None
        queued = self.outgoing.frames  # at the read's arrival, as traced
        counters.messages_in += len(messages)  # received, also those after a problem
        with self.outgoing.handling_read(len(messages)):
            for index, message in enumerate(messages):
                if type(message) is list:  # a PublishArray
                    rest = self._route(link, message, payloads[index], index)
                    if rest is not None:
                        await rest
                elif self.tracer is None:
                    problem = await self._handle(link, message)
                else:
                    link.trace_notes += (MARK, index, time.time_ns())
                    cpu_before = time.thread_time_ns()
                    problem = await self._handle(link, message)
                    link.untraced_cpu_ns += time.thread_time_ns() - cpu_before
                if problem is not None:
                    break
            # Traced before the write-through: a send to a local peer can run the peer
            # at once (the kernel wakes it on this core), and that is not this event's
            # service but the link's delay (as when the writer task sends).
            if self.tracer is not None:
                if link.trace_rows:
                    self._trace_read(link, frames, len(messages), t_read, cpu_read, queued)
                link.trace_notes = []
                link.untraced_cpu_ns = 0
        return problem

    def _trace_read(
        self,
        link: Link,
        frames: bytes | bytearray,
        batch: int,
        t_read: int,
        cpu_read: int,
        queued: int,
    ) -> None:
        """Hand the rows of the events of the read just handled to the recorder."""
        assert self.tracer is not None
        link.trace_notes += (MARK, batch, time.time_ns())  # the read's end
        cpu_ns = time.thread_time_ns() - cpu_read - link.untraced_cpu_ns if cpu_read else 0
        subscriptions = self.router.subscription_count
        self.tracer.add_read(
            (link.node, t_read, batch, cpu_ns, subscriptions, queued),
            frames,
            link.trace_rows,
            link.trace_notes,
        )
        link.trace_rows = bytearray()

    async def _writer(self, link: Link) -> None:
        """Send the queue in batches; once `_finish` closed the queue, half-close."""
        stream = link.stream
        try:
            await link.queue.writer(stream)
            if isinstance(stream, trio.abc.HalfCloseableStream):
                await stream.send_eof()
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            link.queue.close()
            link.scope.cancel()
        finally:
            link.writer_done.set()

    # -- messages -----------------------------------------------------------------

    async def _handle(self, link: Link, message: Any) -> tuple[str, str] | None:
        """Act on one message; return (code, why) when the connection must close."""
        if isinstance(message, Subscribe):
            try:
                f = Filter.from_wire(message.filter)
            except ValueError as exc:
                return ("filter", f"subscription {message.sub_id}: {exc}")
            await self._perform(self.router.subscribe(link.link_id, message.sub_id, f))
        elif isinstance(message, Unsubscribe):
            await self._perform(self.router.unsubscribe(link.link_id, message.sub_id))
            await self._send(link, UnsubAck(message.sub_id))
        elif isinstance(message, SubAck):
            await self._perform(self.router.sub_acked(link.link_id, message.sub_id))
        elif isinstance(message, Flush):
            await self._send(link, FlushAck(message.token))
        elif isinstance(message, Ping):
            await self._send(link, Pong(message.nonce))
        elif isinstance(message, StatsRequest):
            await self._send(link, Stats(self.stats()))
        elif isinstance(message, Bye | Error):
            if isinstance(message, Error):
                self._log.warning("peer_error", link=link.link_id, code=message.code)
            return _CLOSED
        return None  # UnsubAck, Pong: nothing to do

    def _route(
        self, link: Link, event: PublishArray, payload: bytes, index: int
    ) -> Awaitable[None] | None:
        """Route one event, decoded from `payload`, the `index`th message of its read:
        forward it, deliver it, and trace the decision. Returns what is left to do when
        a target's queue is full, or a traced event went to several or no targets, for
        the caller to await; else None. (Not a coroutine itself: one made per event was
        ~0.2 us of the broker's ~9 us per event at 1-to-1.)"""
        tracer = self.tracer
        if tracer is not None:
            t_start = _now()
        link.counters.events_in += 1
        if self.name in event[4]:  # its path
            self.events_dropped += 1
            self.drops["cycle"] += 1
            cycles = self.drops["cycle"]
            if worth_logging(cycles):
                self._log.error(
                    "cycle_dropped",
                    event_id=event[1],
                    path=event[4],
                    link=link.link_id,
                    cycles_dropped=cycles,
                )
            if tracer is not None:
                link.trace_rows.extend(pack_row(t_start, tracer.outcome_of(()), 0, 0))
                link.trace_notes += (DROPPED, index, "cycle")
            return None
        decision = self.router.route(link.link_id, event[3])  # its attributes
        self.events_routed += 1
        links = self.links
        deliver_to = decision.deliver
        if len(deliver_to) == 1 and not decision.forward:
            # One client and no broker (every event at a broker whose one subscriber
            # wants it): in as few steps as it takes while the client's queue has room;
            # a full or closed queue takes the way below (which builds the frame again).
            for target, sub_ids in deliver_to.items():
                found = links.get(target)
                if found is not None and not found.queue.closed:
                    try:
                        frame = found.conn.send_encoded(
                            Deliver, self._frames.deliver_received(event, payload, sub_ids)
                        )
                    except ProtocolError:  # over max_frame: the way below drops it
                        break
                    if found.queue.put_nowait(frame):
                        found.counters.events_out += 1
                        if tracer is not None:
                            link.trace_rows.extend(
                                pack_row(
                                    t_start,
                                    found.trace_outcome,
                                    decision.filters_matched,
                                    len(frame),
                                )
                            )
                        return None
        sends: list[tuple[Link, bytes]] = []
        missed: list[str] = []  # "REASON:LINK" of each target that does not get it
        frames = self._frames
        forwarded: bytes | None = None  # the event is encoded once for every broker
        if decision.forward:
            try:
                forwarded = frames.publish_received(event, payload)
            except ProtocolError as exc:
                self._too_large(event, link, decision.forward, exc)
            for target in decision.forward:
                found = links.get(target)
                if found is None or found.queue.closed:
                    missed.append(f"link-down:{target}")
                elif forwarded is None:
                    missed.append(f"too-large:{target}")
                else:
                    sends.append((found, found.conn.send_encoded(Publish, forwarded)))
        # Each client numbers its subscriptions from 1, so many clients get Delivers
        # with the same sub ids: the same bytes, spliced once for consecutive ones.
        last_ids: list[int] | None = None
        deliver: bytes | None = None
        for target, sub_ids in decision.deliver.items():
            found = links.get(target)
            if found is None or found.queue.closed:
                missed.append(f"link-down:{target}")
                continue
            if sub_ids != last_ids:
                try:
                    deliver = (
                        frames.deliver(forwarded, sub_ids)
                        if forwarded is not None
                        else frames.deliver_received(event, payload, sub_ids)
                    )
                except ProtocolError as exc:
                    deliver = None
                    self._too_large(event, link, [target], exc)
                last_ids = sub_ids
            if deliver is None:
                missed.append(f"too-large:{target}")
            else:
                sends.append((found, found.conn.send_encoded(Deliver, deliver)))
        blocked = []
        for out, frame in sends:
            if out.queue.put_nowait(frame):
                out.counters.events_out += 1
            elif self._drop_when_full and out.kind == "client":
                out.counters.events_dropped += 1
                missed.append(f"queue-full:{out.link_id}")
            else:
                blocked.append((out, frame))
        if tracer is None:
            if blocked:
                return self._finish_blocked(blocked, missed, sends)
            if missed:
                self._count_missed(missed, sends)
        elif len(sends) == 1 and not blocked and not missed:
            # The common case, traced in as few steps as it takes: one target, at once.
            # `out` and `frame` are still the loop's, i.e. the one send's (not unpacking
            # sends[0] again: ~0.04 us per event in bench.tracing_loop's harness), and
            # the row is extended, not `+=`'d (no attribute store);
            # broker.trace.hop_trace.EVENT_FIELDS.
            link.trace_rows.extend(
                pack_row(t_start, out.trace_outcome, decision.filters_matched, len(frame))
            )
        else:
            return self._trace_unusual(link, index, t_start, decision, sends, blocked, missed)
        return None

    async def _finish_blocked(
        self, blocked: list[tuple[Link, bytes]], missed: list[str], sends: list[tuple[Link, bytes]]
    ) -> None:
        """The rest of routing an untraced event that has to wait for queue room."""
        await self._send_blocked(blocked, missed)
        if missed:
            self._count_missed(missed, sends)

    async def _trace_unusual(
        self,
        link: Link,
        index: int,
        t_start: int,
        decision: Decision,
        sends: list[tuple[Link, bytes]],
        blocked: list[tuple[Link, bytes]],
        missed: list[str],
    ) -> None:
        """Finish routing a traced event that went to several or no targets, waited for
        queue room or missed a target, and record its row and notes (`_route` keeps the
        one-target case to itself: each step per event shows in a traced broker's
        throughput)."""
        assert self.tracer is not None
        if blocked:
            link.trace_notes += (BLOCKED, index, time.time_ns())
            cpu_before = time.thread_time_ns()
            await self._send_blocked(blocked, missed)
            link.untraced_cpu_ns += time.thread_time_ns() - cpu_before
        if missed:  # trace where the event really went
            sends = self._count_missed(missed, sends)
            link.trace_notes += (DROPPED, index, ",".join(missed))
        outcome = self.tracer.outcome_of(tuple([out.link_id for out, _ in sends]))
        bytes_out = 0
        for _, frame in sends:
            bytes_out += len(frame)
        link.trace_rows.extend(pack_row(t_start, outcome, decision.filters_matched, bytes_out))

    @staticmethod
    async def _send_blocked(blocked: list[tuple[Link, bytes]], missed: list[str]) -> None:
        """Backpressure: wait for room in each full queue, in order; a link that closes
        meanwhile is a missed target."""
        for out, frame in blocked:
            if await out.queue.put(frame):
                out.counters.events_out += 1
            else:
                missed.append(f"link-down:{out.link_id}")

    def _too_large(
        self, event: PublishArray, link: Link, targets: Sequence[Hashable], exc: ProtocolError
    ) -> None:
        """Log an event that cannot be sent on to ``targets``: with this broker's id added
        to its path, or as a Deliver with its subscription ids, its frame would exceed
        ``max_frame`` (the peer's limit too). It is dropped for them (`too-large`)."""
        self.too_large_events += 1
        if worth_logging(self.too_large_events):
            self._log.error(
                "event_too_large",
                event_id=event[1],
                publisher=event[2],
                link=link.link_id,
                targets=targets,
                why=exc.message,
                too_large_events=self.too_large_events,
            )

    def _count_missed(
        self, missed: list[str], sends: list[tuple[Link, bytes]]
    ) -> list[tuple[Link, bytes]]:
        """Count the targets an event missed; return the sends that did happen."""
        self.events_dropped += 1
        for entry in missed:
            self.drops[entry.split(":", 1)[0]] += 1
        gone = {entry.split(":", 1)[1] for entry in missed}
        return [(out, frame) for out, frame in sends if out.link_id not in gone]

    async def _perform(self, actions: list[Action]) -> None:
        for action in actions:
            await self._enqueue_action(action)

    async def _enqueue_action(self, action: Action) -> None:
        link = self.links.get(action.link)
        if link is None:
            return
        if isinstance(action, SendSubscribe):
            await self._send(link, Subscribe(action.sub_id, action.filter.to_wire()))
        elif isinstance(action, SendUnsubscribe):
            await self._send(link, Unsubscribe(action.sub_id))
        elif isinstance(action, SendSubAck):
            await self._send(link, SubAck(action.sub_id))

    async def _send(self, link: Link, message: Any) -> None:
        if not link.closed:
            await link.queue.put(link.conn.send(message))

    # -- introspection --------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """Counters of the broker and of each link, as answered to `stats` requests."""
        links = {}
        for link_id, link in self.links.items():
            c = link.counters
            links[link_id] = {
                "kind": link.kind,
                "events_in": c.events_in,
                "events_out": c.events_out,
                "bytes_in": c.bytes_in,
                "bytes_out": c.bytes_out,
                "messages_in": c.messages_in,
                "messages_out": c.messages_out,
                "events_dropped": c.events_dropped,
                "queue_depth": link.queue.queued,
            }
        router = self.router.stats()
        parent_connected = self.parent_link_id in self.links
        return {
            "broker": self.name,
            "topology": self.topology.name,
            "pid": os.getpid(),
            "cpu_s": time.process_time(),  # replay's CPU per phase of brokers anywhere
            "trace_file": "" if self.tracer is None else str(self.tracer.path),
            # Rows recorded, and of them in the file and lost so far (a replay attached
            # to this broker copies its file once the last two add up to the first).
            "trace_rows": 0 if self.tracer is None else self.tracer.rows_recorded,
            "trace_rows_written": 0 if self.tracer is None else self.tracer.rows_written,
            "trace_rows_lost": 0 if self.tracer is None else self.tracer.rows_lost,
            "run_id": self.config.run_id,
            "uptime_s": round((time.time_ns() - self.started_ns) / 1e9, 3),
            "time_ns": time.time_ns(),  # the broker's wall clock (replay's clock offsets)
            "routing": router["strategy"],
            "parent": "" if self.spec.parent is None else str(self.spec.parent),
            "parent_connected": int(parent_connected),
            # Why the parent is not connected, and for how long ("" and 0 when it is).
            "parent_problem": "" if parent_connected else self.parent_outage.reason,
            "parent_unreachable_s": round(self.parent_outage.lasted(time.monotonic()), 1),
            "children_connected": sum(
                1 for link_id in self.links if link_id in {f"broker:{c}" for c in self.children}
            ),
            "subscriptions": router["subscriptions"],
            "forwarded": router["forwarded"],
            "forwarded_total": router["forwarded_total"],
            "pending_acks": router["pending_acks"],
            "events_routed": self.events_routed,
            "events_dropped": self.events_dropped,
            "drops": dict(self.drops),
            "links": links,
        }


def _failure(exc: BaseException) -> str:
    """What went wrong with a link, for the log: the exception's message, or its cause's
    when it has none (trio's BrokenResourceError carries the TLS error, such as
    CERTIFICATE_VERIFY_FAILED, as its cause)."""
    if str(exc) or exc.__cause__ is None:
        return str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {exc.__cause__}"


def _tls_refusal(exc: BaseException) -> bool:
    """Whether a link failed because TLS refused the peer (no client certificate, one
    from another CA, not TLS at all), rather than the peer leaving mid-handshake (as
    port probes do; not logged)."""
    cause = exc.__cause__
    return isinstance(cause, ssl.SSLError) and not isinstance(cause, ssl.SSLEOFError)


async def _read_one(stream: trio.abc.Stream, conn: Connection) -> tuple[Any, list[Any]]:
    """Read until the first message; return it and any messages that came with it."""
    while True:
        data = await stream.receive_some(READ_SIZE)
        if not data:
            raise ProtocolError("unexpected", _CLOSED_IN_HANDSHAKE)
        messages = conn.receive_data(data)
        if messages:
            return messages[0], messages[1:]


async def _refuse(stream: trio.abc.Stream, code: str, message: str) -> None:
    """Send Error and close, within a second: a peer that does not read cannot hold the
    connection open (a cancelled aclose still closes; TLS's close_notify may be lost)."""
    with trio.move_on_after(1.0):
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            await stream.send_all(error_frame(code, message))
        await stream.aclose()
    await trio.aclose_forcefully(stream)
