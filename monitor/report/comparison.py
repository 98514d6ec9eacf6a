"""Prediction beside measurement: each repetition's predictions joined with each
repetition's measurement, with the errors and, over repetitions, the measurement's
interval and spread (`monitor.repeats`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from monitor.measured import in_window
from monitor.repeats import inside, measured_summary, predicted_summary
from monitor.report.inputs import SHOWN_METHODS


@dataclass
class Comparison:
    """Rows of prediction beside measurement, and the worst/mean errors; with several
    repetitions, the measurement's interval and spread beside each row."""

    throughput: pd.DataFrame
    latency: pd.DataFrame
    chosen_subscriber: str | None
    summary: dict[str, float] = field(default_factory=dict)
    repetitions: int = 1


def _predicted(predictions: pd.DataFrame, kind: str, metric: str, method: str) -> pd.DataFrame:
    p = predictions[
        (predictions["kind"] == kind)
        & (predictions["metric"] == metric)
        & (predictions["method"] == method)
    ]
    return p[["entity", "predicted", "ci_low", "ci_high"]]


Measurement = tuple[pd.Series, pd.Series]
"""One measurement replay: throughput per broker, mean latency (ms) per "pub>sub" pair."""


def measurement_of(run_dir: Path) -> Measurement:
    """What a replay measured in its window (the same figures the Spark analysis gives,
    straight from the traces: `monitor.measured`)."""
    throughput, latency = in_window(run_dir)
    throughput.index = throughput.index.astype(str)
    pairs = latency.groupby(["publisher", "subscriber"])["latency_ms"].mean()
    pairs.index = [f"{p}>{s}" for p, s in pairs.index]
    return throughput, pairs


def compare(
    predictions: Sequence[pd.DataFrame], measurements: Sequence[Measurement], pairs: pd.DataFrame
) -> Comparison:
    """Join each repetition's predictions with each repetition's measurement
    (`monitor.repeats`): medians, intervals, spread, errors, and whether each prediction
    lies inside the measurement's interval. `pairs` describes the latency pairs
    (publisher, subscriber, deliveries, hops) from one analysed measurement."""
    several = len(measurements) > 1
    throughput = measured_summary([m[0] for m in measurements]).rename(columns={"entity": "broker"})
    throughput = throughput.sort_values("broker", key=lambda s: s.astype(int))
    info = pairs.assign(entity=pairs["publisher"] + ">" + pairs["subscriber"])
    latency = info[["publisher", "subscriber", "entity", "deliveries", "hops"]].merge(
        measured_summary([m[1] for m in measurements]), on="entity", how="left"
    )
    methods = [m for m in SHOWN_METHODS if any(m in set(p["method"]) for p in predictions)]
    frames = {"throughput": throughput, "latency": latency}
    for name, (kind, metric, key) in {
        "throughput": ("broker", "throughput", "broker"),
        "latency": ("pair", "latency_ms", "entity"),
    }.items():
        frame = frames[name]
        for method in methods:
            p = predicted_summary(
                [_predicted(x, kind, metric, method) for x in predictions], method
            ).rename(columns={"entity": key})
            frame = frame.merge(p, on=key, how="left")
            frame[f"{method}_err_%"] = _rel_error(frame[method], frame["measured"])
            if several:
                frame[f"{method}_in_meas_ci"] = inside(
                    frame[method], frame["meas_ci_low"], frame["meas_ci_high"]
                )
        if not several:
            frame = frame.drop(columns=["meas_ci_low", "meas_ci_high", "spread_%", "runs"])
        empty = [c for c in frame.columns if c.endswith(("_ci_low", "_ci_high"))]
        empty = [c for c in empty if frame[c].isna().all() and not c.startswith("meas_")]
        frames[name] = frame.drop(columns=["runs", *empty], errors="ignore")
    comparison = Comparison(
        frames["throughput"],
        frames["latency"],
        _chosen_subscriber(frames["latency"]),
        repetitions=len(measurements),
    )
    for method in methods:
        for name, frame in frames.items():
            comparison.summary.update(_error_summary(frame, name, method, several))
    return comparison


def _error_summary(frame: pd.DataFrame, name: str, method: str, several: bool) -> dict[str, float]:
    """Worst and mean error; with repetitions, how many rows lie within the spread and
    inside the measurement's interval, and the mean spread."""
    known = frame[frame[f"{method}_err_%"].notna()]
    errors = known[f"{method}_err_%"].abs()
    if not len(errors):
        return {}
    out = {
        f"{name}_{method}_worst": float(errors.max()),
        f"{name}_{method}_mean": float(errors.mean()),
        f"{name}_{method}_rows": float(len(errors)),
    }
    if several:
        spread = known["spread_%"]
        out[f"{name}_{method}_spread_mean"] = float(spread.mean())
        out[f"{name}_{method}_within_spread"] = float((errors <= spread).sum())
        out[f"{name}_{method}_inside"] = float((known[f"{method}_in_meas_ci"] == "yes").sum())
    return out


def _rel_error(predicted: pd.Series, measured: pd.Series) -> pd.Series:
    return (predicted - measured) / measured * 100.0


def _chosen_subscriber(latency: pd.DataFrame) -> str | None:
    """The subscriber that hears from the most publishers (ties: by name), for the
    Table 6.2 view; the thesis used 'a randomly selected subscriber'."""
    if latency.empty:
        return None
    counts = latency.groupby("subscriber")["publisher"].nunique()
    best = counts[counts == counts.max()].index
    return sorted(best, key=natural_order)[0]


def natural_order(name: str) -> tuple[str, int]:
    digits = "".join(c for c in name if c.isdigit())
    return (name.rstrip("0123456789"), int(digits) if digits else 0)
