"""Where a replay's clients run, and what it does to the measured path: the siena15
case study replayed with every client in one process (`clients = "single"`), with one
process per home broker (`"broker"`) and with each client in a process of its own
(`"process"`, the default), in rotation in one run.

    python -m bench.placement [--rounds 3] [--scenario s1] [--duration 20] [--quick]

Per replay: the mean of each stage of an event's path from the traces
(`monitor.characterize`: publish = client to home broker, link = broker to broker,
deliver = last broker to subscriber, service = a broker's time per event, averaged
over brokers) and the end-to-end latency of every delivery in the measurement window
(mean and median). Each figure is reported per mode as the median over the rounds
with its range, and written to bench/results/placement.json (NAME.json with --name).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import write_result
from broker.local_network import REPO, on_free_ports
from monitor.characterize import characterize
from monitor.replay import replay
from monitor.traces import read_manifest, read_table
from topologies import Deployment, load_case_study
from topologies.generators import to_toml

MODES = ("single", "broker", "process")


def measure(
    study_file: Path, mode: str, scenario: str, duration_s: float, workdir: Path
) -> dict[str, Any]:
    """One replay in `mode`; its stage means and end-to-end latency (us)."""
    study = load_case_study(study_file)
    placed = workdir / f"{mode}.toml"
    placed.write_text(to_toml(dataclasses.replace(study, deployment=Deployment(clients=mode))))
    run = workdir / f"{mode}-{time.monotonic_ns()}"
    result = replay(placed, run, scenario=scenario, duration_s=duration_s, quiet=True)
    if result.counts.lost or result.counts.unexpected:
        raise RuntimeError(f"{mode}: {result.counts}")
    char = characterize(run)
    stages = char.stage_means_us()
    service = [v for k, v in stages.items() if k.startswith("service ")]
    phases = read_manifest(run)["phases"]
    deliveries = read_table(run, "deliveries").table.to_pandas()
    window = deliveries["t_publish_ns"].between(
        phases["measure_start_ns"], phases["measure_end_ns"]
    )
    in_window = deliveries.loc[window]
    latency = (in_window["t_deliver_ns"] - in_window["t_publish_ns"]) / 1e3
    return {
        "publish_us": stages["publish"],
        "link_us": stages["link"],
        "deliver_us": stages["deliver"],
        "service_us": float(np.mean(service)),
        "latency_mean_us": float(latency.mean()),
        "latency_p50_us": float(latency.median()),
        "deliveries": int(window.sum()),
        "client_processes": sum(p["kind"] == "clients" for p in read_manifest(run)["processes"]),
    }


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per figure: the median over the rounds and the range."""
    out: dict[str, Any] = {}
    for key in runs[0]:
        values = [r[key] for r in runs]
        out[key] = {"median": statistics.median(values), "min": min(values), "max": max(values)}
    return out


def table(result: dict[str, Any]) -> str:
    """The Markdown table of a result: medians with their ranges, per mode."""
    rows = [
        ("publish stage (client to home broker)", "publish_us"),
        ("link stage (broker to broker)", "link_us"),
        ("delivery stage (broker to subscriber)", "deliver_us"),
        ("broker service time", "service_us"),
        ("end-to-end latency, mean", "latency_mean_us"),
        ("end-to-end latency, median", "latency_p50_us"),
    ]
    lines = [
        "| us, median (range) over rounds | all clients in one process "
        "| a process per home broker | a process per client |",
        "|---|---|---|---|",
    ]
    for label, key in rows:
        cells = []
        for mode in MODES:
            s = result["modes"][mode]["summary"][key]
            cells.append(f"{s['median']:.0f} ({s['min']:.0f}-{s['max']:.0f})")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--scenario", default="s1")
    parser.add_argument("--duration", type=float, default=20.0, help="measured seconds")
    parser.add_argument("--quick", action="store_true", help="1 round of 5 s")
    parser.add_argument("--name", default="placement", help="bench/results/NAME.json")
    given = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(given)
    rounds, duration = (1, 5.0) if args.quick else (args.rounds, args.duration)
    runs: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
    with tempfile.TemporaryDirectory(prefix="bench-placement-") as tmp:
        workdir = Path(tmp)
        study_file = on_free_ports(REPO / "topologies" / "siena15.toml", workdir / "siena15.toml")
        for round_ in range(rounds):
            shift = round_ % len(MODES)  # each mode goes first in turn
            order = MODES[shift:] + MODES[:shift]
            for mode in order:
                figures = measure(study_file, mode, args.scenario, duration, workdir)
                runs[mode].append(figures)
                print(f"round {round_ + 1} {mode}: {figures}", flush=True)
    result = {
        "command": " ".join(["python -m bench.placement", *given]),
        "scenario": args.scenario,
        "duration_s": duration,
        "rounds": rounds,
        "modes": {mode: {"runs": runs[mode], "summary": summary(runs[mode])} for mode in MODES},
    }
    print(table(result))
    print(write_result(args.name, result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
