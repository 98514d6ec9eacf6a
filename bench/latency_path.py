"""Where an event's latency at 500 events/s goes, process by process.

``python -m bench.latency_path [--rounds N] [--events N] [--systems S ...] [--out FILE]``
runs the ``latency_500`` setting of `bench.client_api` (one publisher calling
``await c.publish(event)``, one ``next_batch`` subscriber, 999 filler subscriptions,
150-byte events, 500 events/s) on these systems, their order reversed every other
round:

* ``hop-trio``: ``hop broker``;
* ``hop-asyncio``: the same broker, with our asyncio client in the publisher and the
  subscriber (``client.open_asyncio_client``, as `bench.client_api` runs it; its
  subscriber's "trio's pass" is asyncio's);
* ``floor-trio-route``: `bench.floor_relay` on trio, decoding each event and routing
  it with a `routing.Router` holding the same subscriptions (the least a Python
  broker on trio does; `bench.latency_floor`);
* ``floor-trio``: that relay doing neither (what trio and the protocol cost alone);
* ``mosquitto-gmqtt``: Mosquitto driven by gmqtt (skipped, with the reason recorded,
  if either is missing).

Every Python process on the event's way is probed at its system-call boundary
(`bench.timeline_probe`): when its event loop woke, when it had read the event, when
it began to write it. Mosquitto, in C, is not probed: its share is the span from the
publisher's write to the subscriber's wake-up, two wake-ups included.

Each delivered event's path is rebuilt from those notes: from the publisher's stamp
(``t``, taken as the event is made), each next point is the first note of the next
process at or after the previous point; an event whose path does not close before
its arrival at the subscriber's code is left out (reported as the share matched).
The segments between the points, per system: the median over a round's events, then
the median and range over rounds. Each event is also placed by whether the subscriber
woke on the CPU the publisher wrote on or on the other one (`PLACEMENTS`), and the
total and the span from the publisher's write to the subscriber's wake-up are given
for each placement apart (`placement`). Writes bench/results/latency_path.json (or
``--out``); docs/performance.md reads it.
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.client_api import LOW_RATE, TIMELINE_ENV, Broker, available, run_workers, summarize_run
from bench.common import alternating, median, write_result
from bench.latency_floor import FloorRelay
from bench.throughput import retry_ports, start_process, stop_process
from broker.local_network import free_base_port
from broker.process import process_cpu_s
from topologies.generators import chain, to_toml

SYSTEMS = ("hop-trio", "hop-asyncio", "floor-trio-route", "floor-trio", "mosquitto-gmqtt")

# The points of an event's way after the publisher's stamp, through a Python broker
# ("python": hop or a floor relay) or Mosquitto ("mqtt"): (process, note) for each;
# then the arrival at the subscriber's code.
POINTS = {
    "python": (
        ("pub", "write"),
        ("broker", "wake"),
        ("broker", "read"),
        ("broker", "write"),
        ("sub", "wake"),
        ("sub", "read"),
    ),
    "mqtt": (("pub", "write"), ("sub", "wake"), ("sub", "read")),
}
SEGMENTS = {  # the spans between consecutive points (with the stamp first, the arrival last)
    "python": (
        "publisher: stamp to its write",
        "to the broker: the write to the broker's wake-up",
        "broker: wake-up to the read (trio's pass, the read)",
        "broker: read to its write (decode, route, encode, queue)",
        "to the subscriber: the broker's write to the subscriber's wake-up",
        "subscriber: wake-up to the read (trio's pass, the read)",
        "subscriber: read to the code (decode, hand-off)",
    ),
    "mqtt": (
        "publisher: stamp to its write",
        "through Mosquitto: the write to the subscriber's wake-up",
        "subscriber: wake-up to the read (asyncio's pass, the read)",
        "subscriber: read to the code (decode, hand-off)",
    ),
}
BROKER_SPAN = "the publisher's write to the subscriber's wake-up (the broker, two wake-ups)"
"""What the broker costs an event, its two wake-ups included: through a Python broker
the sum of four segments; through Mosquitto its one middle segment."""


def span_ends(kind: str) -> tuple[int, int]:
    """Where in a path of ``kind`` the publisher's write and the subscriber's wake-up
    are: the ends of `BROKER_SPAN`."""
    return 1, POINTS[kind].index(("sub", "wake")) + 1


def event_paths(stamps: list[int], arrivals: list[int], notes: list[list[int]]) -> list[list[int]]:
    """Each event's points: its stamp, then for each of ``notes`` (sorted times of one
    kind of note of one process, in the order the event meets them) the first at or
    after the point before, then its arrival. Events whose way is not closed by their
    arrival (a note missing or after it) are left out."""
    paths = []
    for stamp, arrival in zip(stamps, arrivals, strict=True):
        path = [stamp]
        for times in notes:
            at = bisect.bisect_left(times, path[-1])
            if at == len(times) or times[at] > arrival:
                break
            path.append(times[at])
        else:
            paths.append([*path, arrival])
    return paths


PLACEMENTS = ("on the publisher's CPU", "on the other CPU")
"""Where the subscriber woke: on the CPU the publisher wrote the event on, or not."""


def sub_woke_on_pub_cpu(
    kind: str, notes: dict[str, dict[str, list[int]]], paths: list[list[int]]
) -> list[bool]:
    """For each of ``paths``, whether the subscriber woke on the CPU the publisher
    wrote the event on (`bench.timeline_probe`'s "write_cpu" and "wake_cpu")."""
    wrote_on = dict(zip(notes["pub"]["write"], notes["pub"]["write_cpu"], strict=True))
    woke_on = dict(zip(notes["sub"]["wake"], notes["sub"]["wake_cpu"], strict=True))
    pub_write, sub_wake = span_ends(kind)
    return [wrote_on[p[pub_write]] == woke_on[p[sub_wake]] for p in paths]


def round_placement(
    kind: str, paths: list[list[int]], same_cpu: list[bool]
) -> dict[str, dict[str, float]]:
    """For each placement the round's events had: their share, and the medians of
    their total and of `BROKER_SPAN` (us)."""
    pub_write, sub_wake = span_ends(kind)
    out = {}
    for name, same in zip(PLACEMENTS, (True, False), strict=True):
        chosen = [p for p, s in zip(paths, same_cpu, strict=True) if s is same]
        if chosen:
            out[name] = {
                "share": round(len(chosen) / len(paths), 3),
                "total": span_us(chosen, 0, -1),
                BROKER_SPAN: span_us(chosen, pub_write, sub_wake),
            }
    return out


def span_us(paths: list[list[int]], start: int, end: int) -> float:
    """The median over ``paths`` of the span from their ``start``th point to their
    ``end``th, in microseconds."""
    return median([p[end] - p[start] for p in paths]) / 1000


def kind_of(system: str) -> str:
    """Which way an event takes through ``system``: a key of POINTS and SEGMENTS."""
    return "mqtt" if system.startswith("mosquitto") else "python"


def round_segments(kind: str, paths: list[list[int]]) -> dict[str, float]:
    """The median of each segment over one round's event paths, in microseconds."""
    out = {name: span_us(paths, k, k + 1) for k, name in enumerate(SEGMENTS[kind])}
    pub_write, sub_wake = span_ends(kind)
    if sub_wake - pub_write > 1:  # (else it is a segment already)
        out[BROKER_SPAN] = span_us(paths, pub_write, sub_wake)
    out["total"] = span_us(paths, 0, -1)
    return out


class ProbedHopBroker:
    """``hop broker`` (one broker, default settings, as `bench.client_api` runs it)
    under `bench.timeline_probe`, as a system of `bench.client_api.scenario`."""

    kind = "hop"

    def __init__(self, notes: Path, client: str = "trio") -> None:
        self.notes = notes
        self.client = client  # our clients' kind: "trio" or "asyncio"
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self, workdir: Path) -> int:
        def start() -> int:
            topology = chain(1, name="hop", base_port=free_base_port(1))
            file = workdir / "hop.toml"
            file.write_text(to_toml(topology))
            cmd = [sys.executable, "-m", "bench.timeline_probe", str(self.notes),
                   "broker.cli", "broker", str(file), "--id", "1"]  # fmt: skip
            address = topology.address(1)
            self._proc = start_process(cmd, address, workdir / "broker.log")
            return address[1]

        return retry_ports(start)

    def stop(self) -> None:
        """Stop the broker as on SIGTERM, so that it writes its notes."""
        if self._proc is not None:
            stop_process(self._proc)
            self._proc = None

    def cpu_s(self) -> float:
        assert self._proc is not None
        return process_cpu_s(self._proc.pid)


def measure(system: str, mosquitto: str | None, events: int, workdir: Path) -> dict[str, Any]:
    """One round of ``system``: its p50, the share of its events whose path was
    rebuilt, and the median of each segment over them."""
    notes_dir = workdir / "notes"
    notes_dir.mkdir(exist_ok=True)
    target: ProbedHopBroker | FloorRelay | Broker
    if system.startswith("hop-"):
        target = ProbedHopBroker(notes_dir / "broker.json", system.removeprefix("hop-"))
    elif system.startswith("floor"):
        target = FloorRelay(system, notes_dir / "broker.json")
    else:
        target = Broker(system, mosquitto)
    os.environ[TIMELINE_ENV] = str(notes_dir)
    try:
        port = target.start(workdir)
        try:
            published, received, _ = run_workers(target, port, 1, events, LOW_RATE)
        finally:
            target.stop()
    finally:
        del os.environ[TIMELINE_ENV]
    notes = {}
    for file in notes_dir.glob("*.json"):  # (taken away: the next round writes anew)
        notes[file.stem] = json.loads(file.read_text())
        file.unlink()
    kind = kind_of(system)
    paths = subscriber_paths(system, notes, received[0])
    same_cpu = sub_woke_on_pub_cpu(kind, notes, paths)
    return {"p50_us": summarize_run(published, received, events, LOW_RATE)["p50_us"],
            "matched": round(len(paths) / max(len(received[0]["arrivals_ns"]), 1), 3),
            "segments_us": round_segments(kind, paths) if paths else {},
            "placement_us": round_placement(kind, paths, same_cpu)}  # fmt: skip


def subscriber_paths(
    system: str, notes: dict[str, dict[str, list[int]]], subscriber: dict[str, Any]
) -> list[list[int]]:
    """`event_paths` of the events ``subscriber`` (its worker's result) got through
    ``system``, from each process's notes (by process: pub, broker, sub)."""
    points = POINTS[kind_of(system)]
    missing = sorted({process for process, _ in points} - notes.keys())
    if missing:
        raise RuntimeError(f"{system}: no notes from the {', '.join(missing)} process "
                           "(it did not end in order)")  # fmt: skip
    arrivals = subscriber["arrivals_ns"]
    stamps = [a - lat for a, lat in zip(arrivals, subscriber["latencies_ns"], strict=True)]
    # (sorted: the wall clock may have been stepped back during the run)
    times = [sorted(notes[process][k]) for process, k in points]
    return event_paths(stamps, arrivals, times)


def run(rounds: int, events: int, systems: tuple[str, ...] = SYSTEMS) -> dict[str, Any]:
    running, skipped, mosquitto = available(list(systems))
    samples: dict[str, list[dict[str, Any]]] = {s: [] for s in running}
    with tempfile.TemporaryDirectory() as tmp:
        for r, system in alternating(rounds, running):
            sample = measure(system, mosquitto, events, Path(tmp))
            samples[system].append(sample)
            print(f"round {r} {system}: p50 {sample['p50_us']} us, "
                  f"{sample['matched']:.0%} matched", flush=True)  # fmt: skip
    out: dict[str, Any] = {"rounds": rounds, "events": events, "rate": LOW_RATE,
                           "skipped": skipped, "systems": {}}  # fmt: skip
    for system, runs in samples.items():
        names = [*SEGMENTS[kind_of(system)], BROKER_SPAN, "total"]
        per_round = {n: [r["segments_us"][n] for r in runs if n in r["segments_us"]] for n in names}
        out["systems"][system] = {
            "p50_us": round(median([r["p50_us"] for r in runs]), 1),
            "matched": median([r["matched"] for r in runs]),
            "segments_us": {n: spread(v) for n, v in per_round.items() if v},
            "placement": placement_summary(runs),
            "runs": runs,
        }
    return out


def placement_summary(runs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per placement, over the rounds that had it: the median share of events, and the
    median and range of the rounds' totals and `BROKER_SPAN`s."""
    out: dict[str, dict[str, Any]] = {}
    for name in PLACEMENTS:
        rounds = [r["placement_us"][name] for r in runs if name in r["placement_us"]]
        shares = [r["placement_us"].get(name, {}).get("share", 0.0) for r in runs]
        if rounds:
            out[name] = {"share": median(shares), "rounds": len(rounds)}
            for measure in ("total", BROKER_SPAN):
                out[name][measure] = spread([r[measure] for r in rounds])
    return out


def spread(values: list[float]) -> dict[str, Any]:
    """The median and range of the rounds' ``values``, to a tenth."""
    low, high = round(min(values), 1), round(max(values), 1)
    return {"median": round(median(values), 1), "range": [low, high]}


def table(result: dict[str, Any]) -> str:
    """The segments of each system as markdown rows: segment, median, range."""
    lines = ["| System | Segment | Median (us) | Range over rounds (us) |", "|---|---|---:|---|"]
    for system, measured in result["systems"].items():
        for name, seg in measured["segments_us"].items():
            low, high = seg["range"]
            lines.append(f"| {system} | {name} | {seg['median']:.1f} | {low:.1f} to {high:.1f} |")
    return "\n".join(lines)


def placement_table(result: dict[str, Any]) -> str:
    """Each system's events by placement as markdown rows: the share of events, the
    total and the publisher's write to the subscriber's wake-up (medians over rounds)."""
    lines = ["| System | Subscriber woke | Share of events | Rounds | Total (us) | "
             "Publisher's write to the subscriber's wake-up (us) |",
             "|---|---|---:|---:|---:|---:|"]  # fmt: skip
    for system, measured in result["systems"].items():
        for name, placed in measured.get("placement", {}).items():
            total, span = placed["total"]["median"], placed[BROKER_SPAN]["median"]
            lines.append(f"| {system} | {name} | {placed['share']:.0%} | {placed['rounds']} "
                         f"| {total:.1f} | {span:.1f} |")  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10, help="rounds (default 10)")
    parser.add_argument("--events", type=int, default=2000, help="events per run (default 2000)")
    parser.add_argument("--systems", nargs="+", choices=SYSTEMS, default=SYSTEMS)
    parser.add_argument("--out", type=Path, help="result file (default: latency_path.json)")
    parser.add_argument("--table", type=Path, metavar="RESULT", help="print RESULT's table")
    args = parser.parse_args(argv)
    if args.table:
        result = json.loads(args.table.read_text())
        print(table(result), placement_table(result), sep="\n\n")
        return
    result = run(args.rounds, args.events, tuple(args.systems))
    print(write_result("latency_path", result, args.out))
    print(table(result), placement_table(result), sep="\n\n")
    for system, measured in result["systems"].items():
        print(f"{system}: p50 {measured['p50_us']} us, {measured['matched']:.0%} of events matched")
    for system, why in result["skipped"].items():
        print(f"skipped {system}: {why}")


if __name__ == "__main__":
    main()
