"""How reproducible one replay is, and where the clients run: the siena15 case study
replayed K times in each client placement, in rotation in one run: every client in one
process (`clients = "single"`, how replays ran before), one process per home broker
(`"broker"`), each client in a process of its own (`"process"`, the default).

    python -m bench.reproducibility [--rounds 5] [--modes single process]
        [--scenario s1] [--duration 20] [--repeats 3] [--quick] [--name NAME]
    python -m bench.reproducibility --summarize bench/results/NAME.json

Per replay: the mean of each stage of an event's path from the traces
(`monitor.characterize`: publish = client to home broker, link = broker to broker,
deliver = last broker to subscriber, service = a broker's time per event, averaged
over brokers), the end-to-end latency of every delivery in the measurement window
(mean and median), and each (publisher, subscriber) pair's mean latency. Per mode:
each figure's median over the rounds with its range, and the run-to-run coefficient
of variation (standard deviation over mean, across the rounds) of every pair's mean
latency (median and worst over pairs) and of each stage's mean.

And per mode, the *floor*: how well a perfect model could score in `hop validate`'s
comparison on this host. The model is perfect when its prediction is what another
replay of the same events measures; so the replays are split into two disjoint sets
of `--repeats` (3, as `make demo` runs), one taken as the prediction (the median of
its replays, as `hop validate` takes the median of its predictions), the other as the
measurement (median, bootstrap 95 % interval, spread; `monitor.repeats`), in every
way the rounds allow. Per split: the mean and worst error over pairs, and the share of
pairs whose "prediction" lies inside the measurement's interval and within its
spread. A target stricter than these figures cannot be met by any model on this host
with replays of this length. Written to bench/results/reproducibility.json
(NAME.json with --name).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
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
from monitor.measured import in_window
from monitor.repeats import bootstrap_median_interval, spread_percent
from monitor.replay import replay
from monitor.traces import read_manifest
from topologies import Deployment, load_case_study
from topologies.generators import to_toml
from topologies.model import ClientMode

MODES: tuple[ClientMode, ...] = ("single", "broker", "process")


def measure(
    study_file: Path, mode: ClientMode, scenario: str, duration_s: float, workdir: Path
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
    manifest = read_manifest(run)
    _, deliveries = in_window(run)
    latency = deliveries["latency_ms"] * 1e3  # us
    return {
        "publish_us": stages["publish"],
        "link_us": stages["link"],
        "deliver_us": stages["deliver"],
        "service_us": float(np.mean(service)),
        "latency_mean_us": float(latency.mean()),
        "latency_p50_us": float(latency.median()),
        "deliveries": len(deliveries),
        "client_processes": sum(p["kind"] == "clients" for p in manifest["processes"]),
        "other_cores": manifest["host_load"]["phases"]["measure"]["other_cores"],
        "steal_cores": manifest["host_load"]["phases"]["measure"]["steal_cores"],
        "pairs_ms": {
            f"{pub}>{sub}": float(v)
            for (pub, sub), v in deliveries.groupby(["publisher", "subscriber"])["latency_ms"]
            .mean()
            .items()
        },
    }


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per figure: the median over the rounds and the range; and the coefficients of
    variation across the rounds (pairs' mean latencies, stages' means)."""
    out: dict[str, Any] = {}
    for key in runs[0]:
        if key == "pairs_ms":
            continue
        values = [r[key] for r in runs]
        out[key] = {"median": statistics.median(values), "min": min(values), "max": max(values)}
    if len(runs) > 1:
        pairs = set.intersection(*(set(r["pairs_ms"]) for r in runs))
        cvs = sorted(_cv([r["pairs_ms"][p] for r in runs]) for p in pairs)
        out["pair_cv"] = {
            "pairs": len(cvs),
            "median": statistics.median(cvs),
            "p90": cvs[int(0.9 * (len(cvs) - 1))],
            "max": cvs[-1],
        }
        stages = ("publish_us", "link_us", "deliver_us", "service_us", "latency_mean_us")
        out["stage_cv"] = {key: _cv([r[key] for r in runs]) for key in stages}
    return out


def floor(runs: list[dict[str, Any]], repeats: int) -> dict[str, Any] | None:
    """A perfect model's scores (module doc): per split of the rounds into a
    "prediction" set and a disjoint "measurement" set of `repeats` replays each (fewer
    when the rounds do not allow two such sets), the mean and worst relative error over
    pairs (percent), the shares of pairs inside the measurement's 95 % interval and
    within its spread, and the measurement's mean spread over pairs (percent, as
    `hop validate`'s report gives it); per score its median and range over the splits.
    None with fewer than three rounds."""
    size = min(repeats, len(runs) // 2)
    if size < 1 or len(runs) < 3:
        return None
    pairs = sorted(set.intersection(*(set(r["pairs_ms"]) for r in runs)))
    values = np.array([[r["pairs_ms"][p] for p in pairs] for r in runs])
    scores: dict[str, list[float]] = {"mean_err_%": [], "worst_err_%": [], "inside_ci": []}
    scores["within_spread"], scores["mean_spread_%"] = [], []
    for predicting in itertools.combinations(range(len(runs)), size):
        rest = [i for i in range(len(runs)) if i not in predicting]
        for measuring in itertools.combinations(rest, size):
            predicted = np.median(values[list(predicting)], axis=0)
            measured = values[list(measuring)]
            middle = np.median(measured, axis=0)
            error = np.abs(predicted / middle - 1) * 100
            inside = within = 0
            spreads = [spread_percent(measured[:, j].tolist()) for j in range(len(pairs))]
            for j in range(len(pairs)):
                low, high = bootstrap_median_interval(measured[:, j].tolist())
                inside += bool(low <= predicted[j] <= high)
                within += bool(error[j] <= spreads[j])
            scores["mean_spread_%"].append(float(np.mean(spreads)))
            scores["mean_err_%"].append(float(error.mean()))
            scores["worst_err_%"].append(float(error.max()))
            scores["inside_ci"].append(inside / len(pairs))
            scores["within_spread"].append(within / len(pairs))
    out: dict[str, Any] = {"repeats": size, "pairs": len(pairs), "splits": len(scores["inside_ci"])}
    for key, got in scores.items():
        out[key] = {"median": statistics.median(got), "min": min(got), "max": max(got)}
    return out


def _cv(values: list[float]) -> float:
    """Standard deviation (n - 1) over mean."""
    return statistics.stdev(values) / statistics.mean(values)


LABELS = {
    "single": "all clients in one process",
    "broker": "a process per home broker",
    "process": "a process per client",
}


def table(result: dict[str, Any]) -> str:
    """The Markdown tables of a result: stage means (median and range over rounds) and
    run-to-run variation, per mode."""
    modes = list(result["modes"])
    rows = [
        ("publish stage (client to home broker)", "publish_us"),
        ("link stage (broker to broker)", "link_us"),
        ("delivery stage (broker to subscriber)", "deliver_us"),
        ("broker service time", "service_us"),
        ("end-to-end latency, mean", "latency_mean_us"),
        ("end-to-end latency, median", "latency_p50_us"),
    ]
    head = "| us, median (range) over rounds | " + " | ".join(LABELS[m] for m in modes) + " |"
    lines = [head, "|---" * (len(modes) + 1) + "|"]
    for label, key in rows:
        cells = []
        for mode in modes:
            s = result["modes"][mode]["summary"][key]
            cells.append(f"{s['median']:.0f} ({s['min']:.0f}-{s['max']:.0f})")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    if all("pair_cv" in result["modes"][m]["summary"] for m in modes):
        names = " | ".join(LABELS[m] for m in modes)
        lines += ["", f"| run-to-run variation (CV) | {names} |"]
        lines.append("|---" * (len(modes) + 1) + "|")
        for label, get in (
            ("pair mean latency, median over pairs", lambda x: x["pair_cv"]["median"]),
            ("pair mean latency, 90th percentile", lambda x: x["pair_cv"]["p90"]),
            ("pair mean latency, worst pair", lambda x: x["pair_cv"]["max"]),
            ("publish stage", lambda x: x["stage_cv"]["publish_us"]),
            ("link stage", lambda x: x["stage_cv"]["link_us"]),
            ("delivery stage", lambda x: x["stage_cv"]["deliver_us"]),
            ("broker service", lambda x: x["stage_cv"]["service_us"]),
        ):
            cells = [f"{100 * get(result['modes'][m]['summary']):.1f} %" for m in modes]
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
    floors = [result["modes"][m].get("floor") for m in modes]
    if all(floors):
        size = floors[0]["repeats"]
        lines += [
            "",
            f"| a perfect model, median (range) over splits ({size} against {size}) | "
            + " | ".join(LABELS[m] for m in modes)
            + " |",
        ]
        lines.append("|---" * (len(modes) + 1) + "|")
        for label, key, scale, unit in (
            ("latency error over pairs, mean", "mean_err_%", 1, " %"),
            ("latency error over pairs, worst", "worst_err_%", 1, " %"),
            ("pairs inside the measurement's 95 % interval", "inside_ci", 100, " %"),
            ("pairs within the measurement's spread", "within_spread", 100, " %"),
            ("the measurement's spread, mean over pairs", "mean_spread_%", 1, " %"),
        ):
            cells = [
                f"{scale * f[key]['median']:.1f}{unit} "
                f"({scale * f[key]['min']:.1f}-{scale * f[key]['max']:.1f})"
                for f in floors
            ]
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def summarize_again(path: Path, repeats: int) -> int:
    """Rewrite the summaries and floor of the result file `path` from its replays (as
    the summaries grow: the replays are the measurement); print its tables."""
    result = json.loads(path.read_text())
    for mode in result["modes"].values():
        mode["summary"] = summary(mode["runs"])
        mode["floor"] = floor(mode["runs"], repeats)
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(table(result))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--modes", nargs="+", choices=MODES, default=["single", "process"])
    parser.add_argument("--scenario", default="s1")
    parser.add_argument("--duration", type=float, default=20.0, help="measured seconds")
    parser.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="replays on each side of the floor's comparison (hop validate --repeats)",
    )
    parser.add_argument("--quick", action="store_true", help="2 rounds of 5 s")
    parser.add_argument("--name", default="reproducibility", help="bench/results/NAME.json")
    parser.add_argument(
        "--summarize",
        type=Path,
        metavar="RESULT",
        help="compute RESULT's summaries and floor again from its replays (no replay is run)",
    )
    given = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(given)
    if args.summarize:
        return summarize_again(args.summarize, args.repeats)
    rounds, duration = (2, 5.0) if args.quick else (args.rounds, args.duration)
    modes = tuple(args.modes)
    runs: dict[str, list[dict[str, Any]]] = {mode: [] for mode in modes}
    with tempfile.TemporaryDirectory(prefix="bench-reproducibility-") as tmp:
        workdir = Path(tmp)
        study_file = on_free_ports(REPO / "topologies" / "siena15.toml", workdir / "siena15.toml")
        for round_ in range(rounds):
            shift = round_ % len(modes)  # each mode goes first in turn
            order = modes[shift:] + modes[:shift]
            for mode in order:
                figures = measure(study_file, mode, args.scenario, duration, workdir)
                runs[mode].append(figures)
                shown = {k: v for k, v in figures.items() if k != "pairs_ms"}
                print(f"round {round_ + 1} {mode}: {shown}", flush=True)
    result = {
        "command": " ".join(["python -m bench.reproducibility", *given]),
        "scenario": args.scenario,
        "duration_s": duration,
        "rounds": rounds,
        "modes": {
            mode: {
                "runs": runs[mode],
                "summary": summary(runs[mode]),
                "floor": floor(runs[mode], args.repeats),
            }
            for mode in modes
        },
    }
    print(table(result))
    print(write_result(args.name, result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
