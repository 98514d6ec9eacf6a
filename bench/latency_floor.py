"""How far the broker's latency at 500 events/s is from what a Python process can reach.

``python -m bench.latency_floor [--rounds N] [--events N] [--systems S ...] [--out FILE]``
runs the ``latency_500`` setting of `bench.client_api` (one trio publisher calling
``await c.publish(event)``, one ``next_batch`` subscriber, 999 filler subscriptions,
150-byte events, 500 events/s) against eight systems (or those named), their order
reversed every other round:

* ``hop-trio``: ``hop broker``, as in `bench.client_api`;
* ``floor-trio-route``: `bench.floor_relay` on trio, each event decoded and routed
  by a `routing.Router` holding the subscriptions it was sent, then spliced into
  the subscriber's Deliver;
* ``floor-trio-decode``: the same, decoded but not routed;
* ``floor-trio``: the same relay doing neither: the protocol, nothing more;
* ``floor-epoll``: that relay on a plain `select.epoll` loop;
* ``floor-epoll-route``: the routing relay on that loop: the least a broker whose
  event connections were taken off trio would do;
* ``floor-thread-route``: the routing relay on a thread per connection blocking in
  ``recv``, under one lock: the least a broker whose connections read on threads of
  their own would do;
* ``mosquitto-gmqtt``: Mosquitto driven by gmqtt, the baseline of the client
  library's p50 target (skipped, with the reason recorded, if Mosquitto or gmqtt is
  missing).

Each difference between neighbours is what one part of the broker's work adds to an
event's latency (the rest of the broker's path, routing, decoding, trio's pass): the
median and range of the per-round differences (the systems of a round ran one after
the other); only those whose two systems both ran are reported. Reported per system:
the p50 of every round, the median over rounds, and the broker process's CPU per
event. Writes bench/results/latency_floor.json (or ``--out``).

``python -m bench.latency_floor --table FILE [FILE ...]`` prints a Markdown table of
result files side by side: per system and file, the median p50, then the median over
rounds of the system's ratio to Mosquitto + gmqtt's p50 in the same round, and in how
many rounds it was the lower.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.client_api import LOW_RATE, Broker, available, scenario
from bench.common import REPO, alternating, median, read_result, write_result
from broker.local_network import free_base_port
from broker.process import process_cpu_s

SYSTEMS = (
    "hop-trio",
    "floor-trio-route",
    "floor-trio-decode",
    "floor-trio",
    "floor-epoll",
    "floor-epoll-route",
    "floor-thread-route",
    "mosquitto-gmqtt",
)
BASELINE = "mosquitto-gmqtt"
LABELS = {  # a system's row in `table`
    "floor-trio-route": "floor relay, trio, decoding and routing",
    "floor-trio-decode": "floor relay, trio, decoding",
    "floor-trio": "floor relay, trio",
    "floor-epoll": "floor relay, epoll",
    "floor-epoll-route": "floor relay, epoll, decoding and routing",
    "floor-thread-route": "floor relay, threads, decoding and routing",
}
STOP_TIMEOUT_S = 5.0
DIFFERENCES = (  # (a, b, what a - b measures)
    ("hop-trio", "floor-trio-route", "the rest of the broker's path"),
    ("floor-trio-route", "floor-trio-decode", "routing"),
    ("floor-trio-decode", "floor-trio", "decoding"),
    ("floor-trio", "floor-epoll", "trio's pass"),
    ("floor-trio-route", "floor-epoll-route", "trio's pass, with decoding and routing"),
    ("floor-epoll-route", "floor-epoll", "decoding and routing, off trio"),
    ("hop-trio", "mosquitto-gmqtt", "hop over Mosquitto + gmqtt"),
    ("floor-epoll", "mosquitto-gmqtt", "the bare relay over Mosquitto + gmqtt"),
    ("floor-epoll-route", "mosquitto-gmqtt", "the routing relay off trio over Mosquitto + gmqtt"),
    ("floor-thread-route", "floor-epoll-route", "threads over the epoll loop, routing"),
    ("floor-thread-route", "mosquitto-gmqtt", "the relay on threads over Mosquitto + gmqtt"),
)


class FloorRelay:
    """`bench.floor_relay` as a system of `bench.client_api.scenario`."""

    kind = "hop"  # spoken to by our clients
    client = "trio"

    def __init__(self, system: str, notes: Path | None = None) -> None:
        """``system``: floor-LOOP or floor-LOOP-WORK (`bench.floor_relay`'s options);
        with ``notes``, the relay runs under `bench.timeline_probe`, writing there."""
        _, self.loop, *work = system.split("-")
        self.work = work[0] if work else "none"
        self.notes = notes
        self._proc: subprocess.Popen[str] | None = None

    def start(self, workdir: Path) -> int:
        port = free_base_port(1) + 1
        probe = ["bench.timeline_probe", str(self.notes)] if self.notes else []
        cmd = [sys.executable, "-m", *probe, "bench.floor_relay", "--loop", self.loop,
               "--work", self.work, "--port", str(port)]  # fmt: skip
        self._proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, text=True)
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline().strip()
        if line != "listening":
            self.stop()
            raise RuntimeError(f"floor relay ({self.loop}) did not start: {line or 'no output'}")
        return port

    def stop(self) -> None:
        """Kill the relay (by its PID); a probed one is interrupted instead, so that it
        writes its notes (and killed if it has not ended within seconds)."""
        if self._proc is not None:
            if self.notes:
                self._proc.send_signal(signal.SIGINT)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self._proc.wait(STOP_TIMEOUT_S)
            self._proc.kill()
            self._proc.wait()
            self._proc = None

    def cpu_s(self) -> float:
        """CPU time (user + system) the relay process has used so far."""
        assert self._proc is not None
        return process_cpu_s(self._proc.pid)


def paired_difference(a: list[float], b: list[float], what: str) -> dict[str, Any]:
    """What ``a`` - ``b`` measures, with the median and range of the rounds' differences."""
    differences = [x - y for x, y in zip(a, b, strict=True)]
    return {"measures": what, "median": median(differences),
            "range": [min(differences), max(differences)]}  # fmt: skip


def run(rounds: int, events: int, systems: tuple[str, ...] = SYSTEMS) -> dict[str, Any]:
    running, skipped, mosquitto = available(list(systems))
    samples: dict[str, list[dict[str, Any]]] = {s: [] for s in running}
    with tempfile.TemporaryDirectory() as tmp:
        for r, system in alternating(rounds, running):
            target = FloorRelay(system) if system.startswith("floor") else Broker(system, mosquitto)
            port = target.start(Path(tmp))
            try:
                samples[system].append(scenario(target, port, 1, events, LOW_RATE))
            finally:
                target.stop()
            print(f"round {r} {system}: p50 {samples[system][-1]['p50_us']} us", flush=True)
    p50 = {s: [run["p50_us"] for run in runs] for s, runs in samples.items()}
    return {
        "rounds": rounds,
        "events": events,
        "rate": LOW_RATE,
        "skipped": skipped,
        "p50_us": p50,
        "p50_median_us": {s: median(v) for s, v in p50.items()},
        "broker_cpu_us_per_event": {
            s: median([run["broker_cpu_us_per_event"] for run in runs])
            for s, runs in samples.items()
        },
        "lost": {s: sum(run["lost"] for run in runs) for s, runs in samples.items()},
        "differences_us": {
            f"{a} - {b}": paired_difference(p50[a], p50[b], what)
            for a, b, what in DIFFERENCES
            if a in p50 and b in p50
        },
        "runs": samples,
    }


def against_baseline(p50: list[float], baseline: list[float]) -> str:
    """``ratio x, k of n``: the median over rounds of ``p50`` / ``baseline`` (paired by
    round) and in how many of the rounds ``p50`` was the lower."""
    ratios = [ours / theirs for ours, theirs in zip(p50, baseline, strict=True)]
    lower = sum(ratio < 1 for ratio in ratios)
    return f"{median(ratios):.2f}x, {lower} of {len(ratios)}"


def table(files: list[Path]) -> str:
    """Result files side by side (a column each, headed by its name): per system the
    median p50 in us and, beside the baseline's rounds, `against_baseline`."""
    results = [read_result(file) for file in files]
    for file, result in zip(files, results, strict=True):
        if not isinstance(result.get("p50_us"), dict):
            raise ValueError(f"{file}: not a latency_floor result (no p50_us)")
    present = [s for s in SYSTEMS if any(s in result["p50_us"] for result in results)]
    names = [file.stem.removeprefix("latency_floor_") for file in files]
    lines = ["| system | " + " | ".join(names) + " |", "|---" * (len(files) + 1) + "|"]
    for system in present:
        cells = []
        for result in results:
            p50 = result["p50_us"].get(system)
            baseline = result["p50_us"].get(BASELINE)
            if p50 is None:
                cells.append("")
            elif system == BASELINE or baseline is None:
                cells.append(f"{median(p50):.0f}")
            else:
                cells.append(f"{median(p50):.0f}; {against_baseline(p50, baseline)}")
        lines.append(f"| {LABELS.get(system, system)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10, help="rounds (default 10)")
    parser.add_argument("--events", type=int, default=2000, help="events per run (default 2000)")
    parser.add_argument("--systems", nargs="+", choices=SYSTEMS, default=SYSTEMS,
                        help="the systems to run (default: all, in this order)")  # fmt: skip
    parser.add_argument("--out", type=Path, help="result file (default: latency_floor.json)")
    parser.add_argument("--table", type=Path, nargs="+", metavar="RESULT",
                        help="print the table of these result files and exit")  # fmt: skip
    args = parser.parse_args(argv)
    if args.table:
        try:
            print(table(args.table))
        except ValueError as exc:
            parser.exit(1, f"latency_floor: {exc}\n")
        return
    result = run(args.rounds, args.events, tuple(args.systems))
    print(write_result("latency_floor", result, args.out))
    for system, value in result["p50_median_us"].items():
        cpu = result["broker_cpu_us_per_event"][system]
        print(f"{system:16} p50 {value:7.1f} us (rounds: {sorted(result['p50_us'][system])}), "
              f"broker CPU {cpu} us/event")  # fmt: skip
    for pair, diff in result["differences_us"].items():
        low, high = diff["range"]
        print(f"{pair} ({diff['measures']}): {diff['median']:+.1f} us "
              f"(median of the rounds' differences; {low:+.1f} to {high:+.1f})")  # fmt: skip
    for system, why in result["skipped"].items():
        print(f"skipped {system}: {why}")


if __name__ == "__main__":
    main()
