"""`hop replay`: run a case study's workload on a live broker network and record it.

Steps: start one process per broker with tracing on; connect every subscriber and
wait until all subscriptions are in force (acknowledged); publish at the
configured rates through warm-up and measurement; stop publishing and drain;
stop the brokers with SIGTERM (which flushes their traces); write the manifest;
check from the traces that every publication reached every subscriber whose
filters match it. Publishers and subscribers all run as trio tasks in this
process (at the case study's rates one process is far from being a bottleneck).
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import time
from contextlib import AsyncExitStack
from dataclasses import asdict, dataclass, field, replace
from importlib import metadata
from pathlib import Path
from typing import Any

import trio
from tqdm import tqdm

import client
from broker.probe import clock_offset
from broker.process import BrokerProcesses
from broker.security import ClientCredentials
from broker.trace.schema import TRACE_VERSION
from monitor.errors import InputError
from monitor.traces import read_table
from monitor.tracing import ClientRecorder, attributes_from_json
from monitor.workload import EventGenerator
from routing import parse_filter
from topologies import CaseStudy, load_case_study, publisher_name, subscriber_name
from topologies.model import Workload


class ReplayError(RuntimeError):
    """The replay could not run (bad RUN_DIR, brokers that did not start, ...)."""


@dataclass
class Phases:
    """Phase boundaries in wall-clock ns (time.time_ns(), shared by all processes)."""

    start_ns: int = 0
    measure_start_ns: int = 0
    measure_end_ns: int = 0
    drain_end_ns: int = 0
    # CPU seconds used in the measurement window, per broker process ("1", "2", ...)
    # and by this process driving the clients ("clients"): the whole cost of each
    # process, where hop rows' cpu_ns covers only the routing of each event.
    cpu_s: dict[str, float] = field(default_factory=dict)


@dataclass
class Counts:
    published: int = 0
    delivered: int = 0
    expected_deliveries: int = 0
    lost: int = 0
    unexpected: int = 0
    lost_examples: list[str] = field(default_factory=list)


@dataclass
class ReplayResult:
    run_dir: Path
    run_id: str
    phases: Phases
    counts: Counts
    clock_offsets_ns: dict[str, dict[str, int]] = field(default_factory=dict)
    """Per broker: its clock minus this process's (offset_ns), and the round trip the
    estimate came from (rtt_ns); see `broker.probe.clock_offset`."""


def replay(
    study_file: Path,
    run_dir: Path,
    scenario: str | None = None,
    duration_s: float | None = None,
    warmup_s: float | None = None,
    quiet: bool = False,
    rate_scale: float = 1.0,
) -> ReplayResult:
    """Run the case study in `study_file` and leave traces and a manifest in `run_dir`.

    `rate_scale` multiplies every publisher's rate (after the scenario's).
    """
    study = load_case_study(study_file, filter_parser=parse_filter)
    workload = study.workload or Workload()
    if duration_s is not None:
        workload = replace(workload, duration_s=duration_s)
    if warmup_s is not None:
        workload = replace(workload, warmup_s=warmup_s)
    if rate_scale <= 0:
        raise InputError(f"rate scale must be positive, got {rate_scale}")
    rates = {p: r * rate_scale for p, r in study.rates_for(scenario).items()}
    traces = run_dir / "traces"
    if traces.exists() and any(traces.iterdir()):
        raise InputError(f"{run_dir} already holds traces; choose an empty --out folder")
    traces.mkdir(parents=True, exist_ok=True)
    copy = run_dir / "case_study.toml"
    shutil.copyfile(study_file, copy)
    run_id = f"{study.topology.name}-{scenario or 'base'}-{time.strftime('%Y%m%dT%H%M%S')}"
    creds = ClientCredentials.for_network(study.topology)
    procs = BrokerProcesses(
        copy, study.topology, ["--trace-dir", str(traces), "--run-id", run_id], creds
    )
    try:
        procs.start(log_dir=run_dir / "logs")
        # Each broker waits for its trace writer (pyarrow imported and warmed up, ~0.3 s of
        # CPU besides the broker's own start): allow for 15 on 2 cores, and a busy host.
        procs.wait_listening(timeout=30.0 + 3.0 * len(study.topology.brokers))
        procs.wait_linked()
        offsets = clock_offsets(study, creds)
        pids = {str(b): p.pid for b, p in procs.procs.items()}
        phases = trio.run(_drive, study, workload, rates, traces, run_id, quiet, pids, creds)
    finally:
        codes = procs.stop()
    failed = {b: c for b, c in codes.items() if c != 0}
    counts = check_deliveries(run_dir, study)
    result = ReplayResult(run_dir, run_id, phases, counts, offsets)
    write_manifest(result, study, study_file, scenario, workload, rates, failed)
    if failed:
        raise ReplayError(f"brokers exited with errors: {failed} (see {run_dir / 'logs'})")
    return result


def clock_offsets(study: CaseStudy, creds: ClientCredentials) -> dict[str, dict[str, int]]:
    """Each broker's clock offset against this process (brokers may run on other hosts,
    whose clocks stamp their trace rows)."""
    out = {}
    for broker_id in sorted(study.topology.brokers):
        host, port = study.topology.address(broker_id)
        estimate = clock_offset(host, port, secret=creds.secret, ssl_context=creds.ssl_context)
        out[str(broker_id)] = asdict(estimate)
    return out


async def _drive(
    study: CaseStudy,
    workload: Workload,
    rates: dict[int, float],
    traces: Path,
    run_id: str,
    quiet: bool,
    pids: dict[str, int],
    creds: ClientCredentials,
) -> Phases:
    recorder = ClientRecorder(traces, run_id)
    topology = study.topology
    connect: dict[str, Any] = {"secret": creds.secret, "ssl_context": creds.ssl_context}
    phases = Phases()
    delivered = [0]
    try:
        async with trio.open_nursery() as nursery, AsyncExitStack() as stack:
            for spec in study.subscribers.values():
                name = subscriber_name(spec.id)
                c = await stack.enter_async_context(
                    client.open_client(*topology.address(spec.broker), name=name, **connect)
                )
                for text in spec.filters:
                    sub = await c.subscribe(text)
                    nursery.start_soon(_record, sub, name, str(spec.broker), recorder, delivered)
            publishers = []
            for spec in study.publishers.values():
                c = await stack.enter_async_context(
                    client.open_client(
                        *topology.address(spec.broker), name=publisher_name(spec.id), **connect
                    )
                )
                publishers.append((c, spec, EventGenerator(workload, spec, rates[spec.id])))
            phases.start_ns = time.time_ns()
            phases.measure_start_ns = phases.start_ns + int(workload.warmup_s * 1e9)
            phases.measure_end_ns = phases.measure_start_ns + int(workload.duration_s * 1e9)
            stop_at = trio.current_time() + workload.warmup_s + workload.duration_s
            published = [0]
            async with trio.open_nursery() as publishing:
                for c, spec, generator in publishers:
                    publishing.start_soon(
                        _publish, c, str(spec.broker), generator, stop_at, recorder, published
                    )
                publishing.start_soon(_progress, workload, published, delivered, quiet)
                publishing.start_soon(_measure_cpu, workload, pids, phases.cpu_s)
            for c, _, _ in publishers:
                await c.flush()
            await _drain(workload.drain_s, delivered)
            phases.drain_end_ns = time.time_ns()
    finally:
        recorder.close()
    return phases


async def _publish(
    c: client.AsyncClient,
    broker: str,
    generator: EventGenerator,
    stop_at: float,
    recorder: ClientRecorder,
    published: list[int],
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
        recorder.published(
            event_id, publisher, broker, attributes, t_ns, len(attributes["payload"])
        )
        published[0] += 1


async def _record(
    sub: client.AsyncSubscription,
    subscriber: str,
    broker: str,
    recorder: ClientRecorder,
    delivered: list[int],
) -> None:
    """Record each delivery once per connection: by its lowest matching subscription."""
    while True:
        try:
            d = await sub.next_delivery()
        except client.ClientError:
            return
        if d.sub_ids[0] != sub.id:
            continue
        recorder.delivered(
            d.event_id,
            d.publisher,
            subscriber,
            list(d.sub_ids),
            broker,
            list(d.path),
            d.t_publish_ns,
            d.t_deliver_ns,
        )
        delivered[0] += 1


async def _measure_cpu(workload: Workload, pids: dict[str, int], out: dict[str, float]) -> None:
    """CPU seconds each process spends in the measurement window."""
    await trio.sleep(workload.warmup_s)
    before = _cpu_seconds(pids)
    await trio.sleep(workload.duration_s)
    after = _cpu_seconds(pids)
    out.update({name: round(after[name] - before[name], 4) for name in before})


def _cpu_seconds(pids: dict[str, int]) -> dict[str, float]:
    out = {name: process_cpu_s(pid) for name, pid in pids.items()}
    out["clients"] = time.process_time()
    return out


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _drain(drain_s: float, delivered: list[int]) -> None:
    """Wait until deliveries stop arriving (0.5 s quiet), at most `drain_s` (>= 1 s)."""
    deadline = trio.current_time() + max(1.0, drain_s)
    last = -1
    while trio.current_time() < deadline and delivered[0] != last:
        last = delivered[0]
        await trio.sleep(0.5)


async def _progress(
    workload: Workload, published: list[int], delivered: list[int], quiet: bool
) -> None:
    """A live line: phase, events published and delivered, and their rates."""
    total = workload.warmup_s + workload.duration_s
    with tqdm(total=round(total), unit="s", disable=quiet, file=sys.stderr) as bar:
        last_p, last_d = 0, 0
        for second in range(1, int(total) + 1):
            await trio.sleep(1.0)
            phase = "warm-up" if second <= workload.warmup_s else "measure"
            bar.set_postfix_str(
                f"{phase}: published {published[0]} ({published[0] - last_p}/s), "
                f"delivered {delivered[0]} ({delivered[0] - last_d}/s)"
            )
            bar.update(1)
            last_p, last_d = published[0], delivered[0]


def check_deliveries(run_dir: Path, study: CaseStudy) -> Counts:
    """Compare the recorded deliveries with what the subscribers' filters match."""
    publications = read_table(run_dir, "publications").table
    deliveries = read_table(run_dir, "deliveries").table
    filters = {
        subscriber_name(s.id): [parse_filter(text) for text in s.filters]
        for s in study.subscribers.values()
    }
    expected = set()
    for event_id, attributes in zip(
        publications.column("event_id").to_pylist(),
        publications.column("attributes").to_pylist(),
        strict=True,
    ):
        event = attributes_from_json(attributes)
        for name, fs in filters.items():
            if any(f.matches(event) for f in fs):
                expected.add((event_id, name))
    got = set(
        zip(
            deliveries.column("event_id").to_pylist(),
            deliveries.column("subscriber").to_pylist(),
            strict=True,
        )
    )
    lost = expected - got
    return Counts(
        published=publications.num_rows,
        delivered=deliveries.num_rows,
        expected_deliveries=len(expected),
        lost=len(lost),
        unexpected=len(got - expected),
        lost_examples=[f"{e} -> {s}" for e, s in sorted(lost)[:10]],
    )


def write_manifest(
    result: ReplayResult,
    study: CaseStudy,
    study_file: Path,
    scenario: str | None,
    workload: Workload,
    rates: dict[int, float],
    failed: dict[int, int],
) -> Path:
    """RUN_DIR/manifest.json: what ran, where, when, and what came out of it."""
    manifest: dict[str, Any] = {
        "run_id": result.run_id,
        "case_study": {
            "file": str(study_file),
            "copy": "case_study.toml",
            "name": study.topology.name,
            "routing": study.topology.routing,
            "brokers": len(study.topology.brokers),
            "publishers": len(study.publishers),
            "subscribers": len(study.subscribers),
        },
        "scenario": scenario,
        "rates": {str(k): v for k, v in rates.items()},
        "total_rate": sum(rates.values()),
        "workload": asdict(workload),
        "phases": asdict(result.phases),
        "counts": asdict(result.counts),
        "brokers_failed": {str(k): v for k, v in failed.items()},
        "host": {
            "name": platform.node(),
            "cores": os.cpu_count(),
            "platform": platform.platform(),
        },
        "python": platform.python_version(),
        "packages": {p: _version(p) for p in ("trio", "msgpack", "pyarrow", "pyspark")},
        "git_revision": _git_revision(),
        "clock": "every process stamps time.time_ns(); brokers on other hosts have other "
        "clocks: clock_offsets_ns estimates each broker's offset (its clock minus the "
        "replay's) at replay start; cpu_ns from time.thread_time_ns() of the broker's thread",
        "clock_offsets_ns": result.clock_offsets_ns,
        "trace_schema_version": TRACE_VERSION,
    }
    path = result.run_dir / "manifest.json"
    path.write_text(json.dumps(manifest, indent=2) + "\n")
    return path


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _git_revision() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            check=False,
            cwd=Path(__file__).parent,
        )
    except OSError:
        return None
    return out.stdout.strip() or None
