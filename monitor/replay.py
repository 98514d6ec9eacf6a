"""`hop replay`: run a case study's workload on a live broker network and record it.

Steps: start one process per broker with tracing on, on the host the topology gives
it (or attach to brokers already running); start the client processes where the
case study's [deployment] places them (by default one per client, on its home
broker's host: `monitor.placement`), each connecting its clients and waiting until its
subscriptions are in force; estimate every process's clock offset; start publishing at
one instant everywhere, through warm-up and measurement; drain; stop every process
(the brokers with SIGTERM, which flushes their traces); gather the traces of other
hosts into RUN_DIR; write the manifest; check from the traces that every publication
reached every subscriber whose filters match it.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shlex
import shutil
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from importlib import metadata
from pathlib import Path
from typing import Any

import trio

from broker.hosts import copy_command, launch_command, runs_here
from broker.netio import host_port
from broker.probe import clock_offset, fetch_stats
from broker.process import BrokerProcesses
from broker.protocol import ProtocolError
from broker.security import ClientCredentials
from broker.trace.files import trace_owner
from broker.trace.schema import TRACE_VERSION
from monitor.coordinate import ClientProcessError, Coordinator, Schedule
from monitor.driver import Plan
from monitor.errors import InputError, ReplayError, check_number, made_folder, write_output
from monitor.hostload import HostLoad, phase_bounds
from monitor.placement import ClientProcess, client_processes
from monitor.traces import read_file, read_table, trace_files
from monitor.tracing import attributes_from_json
from routing import parse_filter
from topologies import (
    CaseStudy,
    HostSpec,
    load_case_study,
    subscriber_name,
    to_toml,
)
from topologies.model import Security, Workload

ATTACHED_WAIT_MAX_S = 60.0
"""After the drain, a replay copies the traces of brokers it attached to (they keep
running, so their files are never closed) once each broker's stats say that its trace
writer has put every row recorded by then in the file (or counted it lost): at most
this long (a traced broker hands its rows to its writer at least once a second, and on a
busy host the writer lags behind)."""


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
    attach: bool = False,
) -> ReplayResult:
    """Run the case study in `study_file` and leave traces and a manifest in `run_dir`.

    `rate_scale` multiplies every publisher's rate (after the scenario's). With
    `attach`, the brokers are not started: they already run (each started with
    `hop broker FILE --id N --trace-dir DIR`), and their traces are gathered after.
    """
    study = load_case_study(study_file, filter_parser=parse_filter)
    workload = study.workload or Workload()
    if duration_s is not None:
        workload = replace(workload, duration_s=check_number(duration_s, "duration", positive=True))
    if warmup_s is not None:
        workload = replace(workload, warmup_s=check_number(warmup_s, "warm-up"))
    check_number(rate_scale, "rate scale", positive=True)
    if not study.publishers or not study.subscribers:
        raise InputError(f"{study_file}: a replay needs [[publishers]] and [[subscribers]]")
    rates = {p: r * rate_scale for p, r in study.rates_for(scenario).items()}
    traces = run_dir / "traces"
    if traces.exists() and any(traces.iterdir()):
        raise InputError(f"{run_dir} already holds traces; choose an empty --out folder")
    made_folder(traces, f"--out {run_dir}")
    copy = run_dir / "case_study.toml"
    write_copy(study, study_file, copy)
    run_id = f"{study.topology.name}-{scenario or 'base'}-{time.strftime('%Y%m%dT%H%M%S')}"
    creds = ClientCredentials.for_network(study.topology)
    site = Site(study, run_dir)
    procs = BrokerProcesses(
        copy,
        study.topology,
        ["--trace-dir", str(traces), "--run-id", run_id],
        creds,
        study.deployment,
        elsewhere=(str(site.here_dir), site.there_dir),
        forked=True,
    )
    clients = client_processes(study, site.here)
    site.prepare(
        [procs.host_of(b) for b in ([] if attach else sorted(study.topology.brokers))]
        + [c.host for c in clients]
    )
    phases = Phases()
    offsets: dict[str, dict[str, int]] = {}
    processes: list[dict[str, Any]] = []
    codes: dict[int, int] = {}
    error: Exception | None = None
    load = HostLoad()  # the CPU of processes outside the run, per phase
    recorded: dict[int, int] = {}  # each broker's trace rows after the drain
    try:
        if not attach:
            procs.start(log_dir=run_dir / "logs")
            # Each broker waits for its trace writer (pyarrow imported and warmed up, ~0.3 s
            # of CPU besides the broker's own start): allow for 15 on 2 cores, a busy host.
            procs.wait_listening(timeout=30.0 + 3.0 * len(study.topology.brokers))
        procs.wait_linked()
        attached = _attached_traces(study, creds) if attach else {}
        offsets = clock_offsets(study, creds)
        plan = _planner(study, site, workload, rates, run_id)
        coordinator = Coordinator(clients, study.deployment, plan, run_dir / "logs", quiet)
        with load:
            phases, brokers_cpu, processes = trio.run(
                _coordinate, coordinator, study, creds, workload
            )
        recorded = _recorded_rows(study, creds)
        processes = _broker_records(procs, offsets, brokers_cpu, attach) + processes
    except ClientProcessError as exc:
        error = exc
    finally:
        if not attach:
            # A traced broker exits once its writer process has written every row: on a
            # busy host that takes seconds, and a SIGKILL would lose them.
            codes = procs.stop(timeout=30.0)
        site.gather(error)
    behind: dict[int, str] = {}
    if attach:
        behind = await_traces_written(
            lambda b: _stats(study, creds, b), sorted(attached), ATTACHED_WAIT_MAX_S
        )
        site.gather_attached(attached, procs)
    failed = {b: c for b, c in codes.items() if c != 0}
    short = short_traces(run_dir, recorded)
    counts = check_deliveries(run_dir, study)
    result = ReplayResult(run_dir, run_id, phases, counts, offsets)
    host_load = load.record(phase_bounds(phases), judge=not attach) if load.samples else None
    write_manifest(
        result,
        study,
        study_file,
        scenario,
        workload,
        rates,
        failed,
        processes,
        attach,
        error,
        host_load,
    )
    if error is not None:
        raise ReplayError(f"{error} (what was recorded is in {run_dir})")
    if failed:
        raise ReplayError(f"brokers exited with errors: {failed} (see {run_dir / 'logs'})")
    if behind:
        lag = "; ".join(f"broker {b}: {why}" for b, why in sorted(behind.items()))
        raise ReplayError(f"traces copied incomplete ({lag}); what they hold is in {run_dir}")
    if short:
        lacking = "; ".join(f"broker {b}: {what}" for b, what in sorted(short.items()))
        raise ReplayError(
            f"brokers' traces incomplete ({lacking}): their trace writers failed or fell "
            f"behind (see {run_dir / 'logs'}); what they hold is in {run_dir}"
        )
    return result


def _recorded_rows(study: CaseStudy, creds: ClientCredentials) -> dict[int, int]:
    """Each broker's trace rows recorded so far, from its stats; a broker that cannot be
    asked is left out (its exit status tells what became of it)."""
    recorded = {}
    for b in sorted(study.topology.brokers):
        with contextlib.suppress(ReplayError):
            recorded[b] = _trace_rows(_stats(study, creds, b), b)[0]
    return recorded


def short_traces(run_dir: Path, recorded: dict[int, int]) -> dict[int, str]:
    """The brokers whose hops files in RUN_DIR/traces hold fewer rows than the broker
    had recorded after the drain (`recorded`, from its stats): its trace writer failed
    (a full disk) or fell too far behind and rows were dropped. What each lacks."""
    in_files = dict.fromkeys(recorded, 0)
    for path in trace_files(run_dir, "hops"):
        broker = trace_owner(path).removeprefix("broker")
        if broker.isdigit() and int(broker) in in_files:
            in_files[int(broker)] += sum(b.num_rows for b in read_file(path, "hops")[0])
    return {
        b: f"{in_files[b]} of {rows} rows in its file"
        for b, rows in recorded.items()
        if in_files[b] < rows
    }


def write_copy(study: CaseStudy, study_file: Path, copy: Path) -> None:
    """Write the case study that the run's processes read (and that records the run).

    A study naming secret or certificate files may name them relative to its own
    folder, which the copy is not in: such a study is written out by `to_toml`, which
    gives every path absolute (the file's comments are not kept). Any other study is
    copied byte for byte.
    """
    if study.topology.security == Security():
        shutil.copyfile(study_file, copy)
        return
    header = f"# {study_file.name} as `hop replay` ran it, the files it names made absolute\n"
    copy.write_text(header + to_toml(study))


class Site:
    """The hosts of one replay and the run folder on each: RUN_DIR here, the
    deployment's workdir on the others, where the case study is put before and from
    where traces are gathered after (both by the deployment's copy templates)."""

    def __init__(self, study: CaseStudy, run_dir: Path) -> None:
        self.deployment = study.deployment
        self.run_dir = run_dir
        self.here_dir = run_dir.resolve()
        self.there_dir = self.deployment.workdir or str(self.here_dir)
        self.here = HostSpec("127.0.0.1", "here")
        self.others: dict[str, HostSpec] = {}

    def prepare(self, hosts: list[HostSpec]) -> None:
        """Make the run folder on every other host and put the case study there."""
        for host in hosts:
            if not runs_here(host, self.deployment):
                self.others.setdefault(host.address, host)
        for host in self.others.values():
            mkdir = ["mkdir", "-p", f"{self.there_dir}/traces"]
            _run_or_fail(launch_command(host, self.deployment, mkdir), host, "make the run folder")
            put = copy_command(
                self.deployment.copy_to,
                host,
                str(self.here_dir / "case_study.toml"),
                f"{self.there_dir}/case_study.toml",
            )
            if put is not None:
                _run_or_fail(put, host, "copy the case study")

    def gather(self, error: Exception | None) -> None:
        """Every other host's traces into RUN_DIR/traces (after a failure too: what was
        recorded is kept; a copy that fails then is reported, not raised)."""
        for host in self.others.values():
            fetch = copy_command(
                self.deployment.copy_from,
                host,
                f"{self.there_dir}/traces",
                str(self.here_dir / "traces"),
            )
            if fetch is None:
                continue
            try:
                _run_or_fail(fetch, host, "fetch the traces")
            except ReplayError:
                if error is None:
                    raise

    def gather_attached(self, files: dict[int, str], procs: BrokerProcesses) -> None:
        """The trace files of brokers a user started, into RUN_DIR/traces."""
        dest = self.here_dir / "traces"
        for broker_id, path in files.items():
            host = procs.host_of(broker_id)
            if runs_here(host, self.deployment) or not self.deployment.copy_from:
                source = Path(path)
                if not source.is_file():
                    raise ReplayError(f"broker {broker_id}: trace file {path} is not readable here")
                shutil.copyfile(source, dest / source.name)
                continue
            folder = dest / f".broker{broker_id}"
            folder.mkdir(exist_ok=True)
            source_dir = str(Path(path).parent)
            fetch = copy_command(self.deployment.copy_from, host, source_dir, str(folder))
            assert fetch is not None
            _run_or_fail(fetch, host, f"fetch broker {broker_id}'s trace")
            shutil.move(folder / Path(path).name, dest / Path(path).name)
            shutil.rmtree(folder)


def await_traces_written(
    stats: Callable[[int], dict[str, Any]], brokers: list[int], max_s: float, poll_s: float = 0.2
) -> dict[int, str]:
    """Wait until the trace writer of each broker has put in its file, or counted as
    lost, every row the broker had recorded when first asked (`stats(b)`: broker b's
    stats). Returns what each broker that did not within `max_s` lacks; ReplayError for
    a broker whose stats do not say."""
    recorded = {b: _trace_rows(stats(b), b)[0] for b in brokers}
    deadline = time.monotonic() + max_s
    while True:
        behind: dict[int, str] = {}
        for b in brokers:
            _, written, lost = _trace_rows(stats(b), b)
            if written + lost < recorded[b]:
                behind[b] = f"{written} of {recorded[b]} rows written, {lost} lost"
        if not behind or time.monotonic() >= deadline:
            return behind
        time.sleep(poll_s)


def _trace_rows(stats: dict[str, Any], broker_id: int) -> tuple[int, int, int]:
    """A broker's trace rows recorded, written and lost, from its stats."""
    try:
        return stats["trace_rows"], stats["trace_rows_written"], stats["trace_rows_lost"]
    except KeyError:
        raise ReplayError(
            f"broker {broker_id} does not report how far its trace is written "
            "(its hop is older than this one): its trace cannot be copied complete"
        ) from None


def _stats(study: CaseStudy, creds: ClientCredentials, broker_id: int) -> dict[str, Any]:
    """Broker `broker_id`'s stats; ReplayError naming it when it cannot be asked."""
    host, port = study.topology.address(broker_id)
    try:
        return fetch_stats(host, port, secret=creds.secret, ssl_context=creds.ssl_context)
    except (OSError, ProtocolError) as exc:
        raise ReplayError(
            f"broker {broker_id} at {host_port(host, port)}: cannot ask its stats: {exc}"
        ) from None


def _run_or_fail(cmd: list[str], host: HostSpec, what: str) -> None:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ReplayError(f"host {host.label}: cannot {what}: {exc}") from None
    if done.returncode != 0:
        said = done.stderr.strip().splitlines()[-1:] or [f"exit code {done.returncode}"]
        raise ReplayError(f"host {host.label}: cannot {what} ({shlex.join(cmd)}): {said[0]}")


def _attached_traces(study: CaseStudy, creds: ClientCredentials) -> dict[int, str]:
    """The trace file of every running broker; ReplayError for one not tracing."""
    files = {}
    for broker_id in sorted(study.topology.brokers):
        stats = _stats(study, creds, broker_id)
        if not stats.get("trace_file"):
            host, port = study.topology.address(broker_id)
            raise ReplayError(
                f"broker {broker_id} at {host_port(host, port)} is not tracing: start it with "
                "hop broker FILE --id N --trace-dir DIR"
            )
        files[broker_id] = stats["trace_file"]
    return files


def _planner(
    study: CaseStudy, site: Site, workload: Workload, rates: dict[int, float], run_id: str
) -> Callable[[ClientProcess], Plan]:
    def plan(process: ClientProcess) -> Plan:
        here = runs_here(process.host, study.deployment)
        folder = str(site.here_dir) if here else site.there_dir
        return Plan(
            name=process.name,
            study_file=f"{folder}/case_study.toml",
            trace_dir=f"{folder}/traces",
            run_id=run_id,
            workload=asdict(workload),
            rates={str(p): rate for p, rate in rates.items()},
            publishers=list(process.publishers),
            subscribers=list(process.subscribers),
        )

    return plan


async def _coordinate(
    coordinator: Coordinator, study: CaseStudy, creds: ClientCredentials, workload: Workload
) -> tuple[Phases, dict[str, dict[str, float]], list[dict[str, Any]]]:
    """Start the client processes, run the phases, stop them. Returns the phases (this
    host's clock, with every broker's and the client processes' CPU in the measurement
    window), each broker's CPU per phase, and the client processes' records."""
    phases = Phases()
    marks: dict[str, dict[str, float]] = {}  # broker -> phase boundary -> CPU seconds
    try:
        async with _sole_errors(), trio.open_nursery() as nursery:
            await coordinator.start(nursery)
            await coordinator.measure_offsets()
            phases.start_ns = await coordinator.go()
            phases.measure_start_ns = phases.start_ns + int(workload.warmup_s * 1e9)
            phases.measure_end_ns = phases.measure_start_ns + int(workload.duration_s * 1e9)

            async def broker_cpu() -> None:
                for mark, at_ns in (
                    ("start", phases.start_ns),
                    ("measure_start", phases.measure_start_ns),
                    ("measure_end", phases.measure_end_ns),
                ):
                    await trio.sleep_until(_trio_at(at_ns))
                    for broker, cpu in (await _broker_cpu(study, creds)).items():
                        marks.setdefault(broker, {})[mark] = cpu

            nursery.start_soon(broker_cpu)
            schedule = Schedule(workload.warmup_s, workload.duration_s, workload.drain_s)
            await coordinator.run_phases(schedule)
            phases.drain_end_ns = time.time_ns()
            for broker, cpu in (await _broker_cpu(study, creds)).items():
                marks.setdefault(broker, {})["drain_end"] = cpu
            nursery.cancel_scope.cancel()
    finally:
        await coordinator.stop()
    brokers_cpu = {broker: _per_phase(m) for broker, m in marks.items()}
    for broker, phase_cpu in brokers_cpu.items():
        if "measure" in phase_cpu:
            phases.cpu_s[broker] = phase_cpu["measure"]
    started = coordinator.started.values()
    phases.cpu_s["clients"] = round(sum(s.cpu_s.get("measure", 0.0) for s in started), 4)
    return phases, brokers_cpu, [s.record() for s in started]


def _broker_records(
    procs: BrokerProcesses,
    offsets: dict[str, dict[str, int]],
    cpu: dict[str, dict[str, float]],
    attach: bool,
) -> list[dict[str, Any]]:
    """The manifest's entries for the brokers: host, clock offset, CPU per phase."""
    out = []
    for broker_id in sorted(procs.topology.brokers):
        host = procs.host_of(broker_id)
        proc = procs.procs.get(broker_id)
        out.append(
            {
                "name": f"broker{broker_id}",
                "kind": "broker",
                "host": host.label,
                "address": host.address,
                "pid": proc.pid if proc is not None and runs_here(host, procs.deployment) else None,
                "attached": attach,
                "clock_offset_ns": offsets.get(str(broker_id), {}).get("offset_ns"),
                "clock_rtt_ns": offsets.get(str(broker_id), {}).get("rtt_ns"),
                "cpu_s": cpu.get(str(broker_id), {}),
            }
        )
    return out


def _per_phase(marks: dict[str, float]) -> dict[str, float]:
    """CPU seconds per phase from CPU readings at the phases' boundaries."""
    out = {}
    for phase, begin, end in (
        ("warmup", "start", "measure_start"),
        ("measure", "measure_start", "measure_end"),
        ("drain", "measure_end", "drain_end"),
    ):
        if begin in marks and end in marks:
            out[phase] = round(marks[end] - marks[begin], 4)
    return out


@contextlib.asynccontextmanager
async def _sole_errors() -> AsyncIterator[None]:
    """A nursery's group of one error (a client process failing) as that error."""
    try:
        yield
    except BaseExceptionGroup as group:
        leaves = list(_leaves(group))
        if len(leaves) == 1 and isinstance(leaves[0], Exception):
            raise leaves[0] from None
        raise


def _leaves(error: BaseException) -> Iterator[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            yield from _leaves(inner)
    else:
        yield error


def _trio_at(wall_ns: int) -> float:
    """The trio clock's reading at a wall-clock instant."""
    return trio.current_time() + (wall_ns - time.time_ns()) / 1e9


async def _broker_cpu(study: CaseStudy, creds: ClientCredentials) -> dict[str, float]:
    """Each broker's CPU seconds so far, from its stats (wherever it runs)."""

    def ask() -> dict[str, float]:
        out = {}
        for broker_id in sorted(study.topology.brokers):
            host, port = study.topology.address(broker_id)
            with contextlib.suppress(OSError, ProtocolError, KeyError):
                stats = fetch_stats(host, port, secret=creds.secret, ssl_context=creds.ssl_context)
                out[str(broker_id)] = float(stats["cpu_s"])
        return out

    return await trio.to_thread.run_sync(ask)


def clock_offsets(study: CaseStudy, creds: ClientCredentials) -> dict[str, dict[str, int]]:
    """Each broker's clock offset against this process (brokers may run on other hosts,
    whose clocks stamp their trace rows)."""
    out = {}
    for broker_id in sorted(study.topology.brokers):
        host, port = study.topology.address(broker_id)
        estimate = clock_offset(host, port, secret=creds.secret, ssl_context=creds.ssl_context)
        out[str(broker_id)] = asdict(estimate)
    return out


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
    processes: list[dict[str, Any]] | None = None,
    attach: bool = False,
    error: Exception | None = None,
    host_load: dict[str, Any] | None = None,
) -> Path:
    """RUN_DIR/manifest.json: what ran, where, when, and what came out of it."""
    deployment = study.deployment
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
        "deployment": {
            "clients": deployment.clients,
            "attached": attach,
            "hosts": sorted(
                {study.topology.address(b)[0] for b in study.topology.brokers}
                | {p["address"] for p in processes or []}
            ),
        },
        "processes": processes or [],
        "error": None if error is None else str(error),
        "host_load": host_load,
        "host": {
            "name": platform.node(),
            "cores": os.cpu_count(),
            "platform": platform.platform(),
        },
        "python": platform.python_version(),
        "packages": {p: _version(p) for p in ("trio", "msgpack", "pyarrow", "pyspark")},
        "git_revision": _git_revision(),
        "clock": "every process stamps time.time_ns(); the client processes' trace rows are "
        "written in the replay's clock (each corrected by its process's offset, "
        "processes[].clock_offset_ns); brokers on other hosts have other clocks: "
        "clock_offsets_ns estimates each broker's offset (its clock minus the replay's) at "
        "replay start; cpu_ns from time.thread_time_ns() of the broker's thread",
        "clock_offsets_ns": result.clock_offsets_ns,
        "trace_schema_version": TRACE_VERSION,
    }
    path = result.run_dir / "manifest.json"
    write_output(path, json.dumps(manifest, indent=2) + "\n")
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
