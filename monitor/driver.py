"""A replay's client process: `python -m monitor.driver`, run by `hop replay` on the
host the case study places it, driving some of its publishers and subscribers.

It talks to the replay that started it in JSON lines, its standard input and output
(through ssh or any other launcher, nothing else is needed between the hosts):

1. in: the plan (`Plan`: the case-study file as seen on this host, which clients,
   rates, phases, where to write traces);
2. it connects its clients, subscribes, and answers ``{"ready": PID}``;
3. in: ``{"ping": N}`` any number of times, out: ``{"pong": N, "time_ns": T}``: the
   replay estimates this process's clock offset from them;
4. in: ``{"go": START_NS, "offsets": {client: ns}}``: START_NS is the replay's clock,
   the offsets every client process's clock minus the replay's. Publishing starts at
   START_NS on this host's clock, the same instant for every process; the trace rows'
   times are written in the replay's clock (each corrected by the offset of the
   process that stamped it), so latencies between hosts are comparable;
5. out: ``{"count": [published, delivered]}`` every second, then
   ``{"published": N, "cpu_s": {"warmup": S, "measure": S}}`` when its publishers are
   done (this process's CPU seconds in each phase);
6. in: ``{"drain": true}``: it waits until deliveries stop (or the drain time), closes
   its clients and trace files and answers
   ``{"done": {"delivered": N, "cpu_s_drain": S}}``.

The end of its input at any point stops it: what it recorded is flushed and closed.
"""

from __future__ import annotations

import json
import os
import sys
import time
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

import client
from broker.groups import sole_exception
from broker.security import ClientCredentials
from broker.trace.arrow_writer import TraceFileError, without_pandas
from monitor.tracing import ClientRecorder
from monitor.workload import EventGenerator
from routing import parse_filter
from topologies import CaseStudy, Workload, load_case_study, publisher_name, subscriber_name


@dataclass
class Plan:
    """What one client process does; sent as its first input line."""

    name: str
    study_file: str
    trace_dir: str
    run_id: str
    workload: dict[str, Any]
    rates: dict[str, float]  # publisher id -> events/s
    publishers: list[int] = field(default_factory=list)
    subscribers: list[int] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(self.__dict__)


class Lines:
    """JSON lines in from the replay, out to it."""

    def __init__(self) -> None:
        self._in = trio.lowlevel.FdStream(os.dup(0))
        self._buffer = b""

    async def read(self) -> dict[str, Any] | None:
        """The next message, or None at the end of the input."""
        while b"\n" not in self._buffer:
            data = await self._in.receive_some(65536)
            if not data:
                return None
            self._buffer += data
        line, _, self._buffer = self._buffer.partition(b"\n")
        return json.loads(line)

    @staticmethod
    def write(message: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()


class Driver:
    """The clients of one plan and their trace."""

    def __init__(
        self, plan: Plan, lines: Lines, inbox: trio.MemoryReceiveChannel[dict[str, Any]]
    ) -> None:
        self.plan = plan
        self.lines = lines
        self.inbox = inbox
        self.study: CaseStudy = load_case_study(Path(plan.study_file), filter_parser=parse_filter)
        self.workload = Workload(**self.plan.workload)
        self.recorder = ClientRecorder(Path(plan.trace_dir), plan.run_id, owner=plan.name)
        self.published = 0
        self.delivered = 0
        self.own_offset_ns = 0
        self.offsets: dict[str, int] = {}
        self.cpu_mark = time.process_time()  # where the drain's CPU is counted from

    async def run(self) -> None:
        creds = ClientCredentials.for_network(self.study.topology)
        connect: dict[str, Any] = {"secret": creds.secret, "ssl_context": creds.ssl_context}
        topology = self.study.topology
        try:
            async with trio.open_nursery() as nursery, AsyncExitStack() as stack:
                for sub_id in self.plan.subscribers:
                    sub_spec = self.study.subscribers[sub_id]
                    name = subscriber_name(sub_id)
                    address = topology.address(sub_spec.broker)
                    c = await stack.enter_async_context(
                        client.open_client(*address, name=name, **connect)
                    )
                    for text in sub_spec.filters:
                        sub = await c.subscribe(text)
                        nursery.start_soon(self._record, sub, name, str(sub_spec.broker))
                publishers = []
                for pub_id in self.plan.publishers:
                    pub_spec = self.study.publishers[pub_id]
                    c = await stack.enter_async_context(
                        client.open_client(
                            *topology.address(pub_spec.broker),
                            name=publisher_name(pub_id),
                            **connect,
                        )
                    )
                    rate = self.plan.rates[str(pub_id)]
                    publishers.append((c, pub_spec, EventGenerator(self.workload, pub_spec, rate)))
                self.lines.write({"ready": os.getpid()})
                start_ns = await self._until_go()
                await self._publish_all(publishers, start_ns)
                for c, _, _ in publishers:
                    await c.flush()
                message = await self.inbox.receive()
                if not message.get("drain"):
                    nursery.cancel_scope.cancel()
                    return
                await self._drain()
                nursery.cancel_scope.cancel()
            drain = round(time.process_time() - self.cpu_mark, 4)
            self.lines.write({"done": {"delivered": self.delivered, "cpu_s_drain": drain}})
        finally:
            self.recorder.close()

    async def _until_go(self) -> int:
        """Answer pings until the start instant comes."""
        while True:
            message = await self.inbox.receive()
            if "ping" in message:
                self.lines.write({"pong": message["ping"], "time_ns": time.time_ns()})
            elif "go" in message:
                self.offsets = {k: int(v) for k, v in message["offsets"].items()}
                self.own_offset_ns = self.offsets.get(self.plan.name, 0)
                return int(message["go"]) + self.own_offset_ns

    async def _publish_all(self, publishers: list[Any], start_ns: int) -> None:
        w = self.workload
        await trio.sleep(max(0.0, (start_ns - time.time_ns()) / 1e9))
        stop_at = trio.current_time() + w.warmup_s + w.duration_s
        cpu: dict[str, float] = {}
        async with trio.open_nursery() as nursery:
            for c, spec, generator in publishers:
                nursery.start_soon(self._publish, c, str(spec.broker), generator, stop_at)
            nursery.start_soon(self._report_counts, stop_at)
            nursery.start_soon(self._measure_cpu, cpu)
        self.lines.write({"published": self.published, "cpu_s": cpu})

    async def _publish(
        self, c: client.AsyncClient, broker: str, generator: EventGenerator, stop_at: float
    ) -> None:
        """Publish at the generator's rate until `stop_at` (trio clock), on schedule."""
        next_at = trio.current_time()
        publisher = c.name
        while True:
            next_at += generator.interarrival_s()
            if next_at >= stop_at:
                return
            await trio.sleep_until(next_at)
            attributes = generator.event()
            t_ns = time.time_ns()
            event_id = await c.publish(attributes)
            size = len(attributes["payload"])
            t_replay = t_ns - self.own_offset_ns
            self.recorder.published(event_id, publisher, broker, attributes, t_replay, size)
            self.published += 1

    async def _record(self, sub: client.AsyncSubscription, subscriber: str, broker: str) -> None:
        """Record each delivery once per connection: by its lowest matching subscription."""
        while True:
            try:
                d = await sub.next_delivery()
            except client.ClientError:
                return
            if d.sub_ids[0] != sub.id:
                continue
            self.recorder.delivered(
                d.event_id,
                d.publisher,
                subscriber,
                list(d.sub_ids),
                broker,
                list(d.path),
                d.t_publish_ns - self.offsets.get(d.publisher, 0),
                d.t_deliver_ns - self.own_offset_ns,
            )
            self.delivered += 1

    async def _report_counts(self, stop_at: float) -> None:
        while trio.current_time() + 1.0 < stop_at:
            await trio.sleep(1.0)
            self.lines.write({"count": [self.published, self.delivered]})

    async def _measure_cpu(self, out: dict[str, float]) -> None:
        """CPU seconds this process spends in the warm-up and the measurement window."""
        w = self.workload
        start = time.process_time()
        await trio.sleep(w.warmup_s)
        measure_start = time.process_time()
        await trio.sleep(w.duration_s)
        self.cpu_mark = time.process_time()
        out["warmup"] = round(measure_start - start, 4)
        out["measure"] = round(self.cpu_mark - measure_start, 4)

    async def _drain(self) -> None:
        """Wait until deliveries stop arriving (0.5 s quiet), at most drain_s (>= 1 s)."""
        deadline = trio.current_time() + max(1.0, self.workload.drain_s)
        last = -1
        while trio.current_time() < deadline and self.delivered != last:
            last = self.delivered
            await trio.sleep(0.5)


async def _main() -> None:
    lines = Lines()
    send, inbox = trio.open_memory_channel[dict[str, Any]](64)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_pump, lines, send, nursery.cancel_scope)
        try:
            plan = Plan(**await inbox.receive())
            await Driver(plan, lines, inbox).run()
            nursery.cancel_scope.cancel()
        except* trio.EndOfChannel:
            pass  # the input ended: `_pump` stops the rest, or raises what was wrong with it


async def _pump(
    lines: Lines, send: trio.MemorySendChannel[dict[str, Any]], scope: trio.CancelScope
) -> None:
    """Messages from the replay to the driver; the end of the input stops everything
    (the driver's `finally` closes its trace files)."""
    async with send:
        while (message := await lines.read()) is not None:
            await send.send(message)
    scope.cancel()


def main() -> int:
    without_pandas()  # its trace writers need none: 0.55 s of CPU in each client process
    try:
        trio.run(_main)
    except BaseException as exc:
        failure = sole_exception(exc)
        if not isinstance(failure, TraceFileError):
            raise
        # A trace file it cannot write (a full disk): one line, which the replay shows
        # as the end of this process's log, where a traceback would bury it.
        print(f"hop client process: {failure}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
