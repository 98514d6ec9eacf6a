"""What a report reads: a run's manifest and analysis tables, the layout of a `hop
validate` folder, and the summaries `hop analyze` and `hop predict` leave; every file is
checked as it is read, and one that cannot be used is named (`ReportError`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from monitor.errors import InputError
from monitor.runfiles import (
    AMOUNT,
    COUNT,
    FLAG,
    NS,
    TABLE,
    TEXT,
    Field,
    list_of,
    or_null,
    read_checked_json,
    read_parquet,
    record,
    table_of,
)
from monitor.traces import BROKER_TRACES, MEASURE_WINDOW, is_broker_trace_folder, read_manifest

TABLES = {  # the analysis tables a report reads, with the columns it uses
    "routing_probabilities": ("from_broker", "to_broker", "forwarded", "arrived"),
    "visit_ratios": ("visit_ratio_counted", "visit_ratio_solved"),
    "paths": (),
    "trees": ("events",),
    "brokers": ("broker", "throughput", "utilization", "cpu_mean_ns"),
    "latency": ("publisher", "subscriber", "deliveries", "hops"),
}


PREDICTED = ("kind", "entity", "metric", "method", "predicted", "ci_low", "ci_high")


SIMULATED = ("latency_ms",)


HEADER = (
    "case_study.name",
    "case_study.routing",
    "scenario",
    "host.name",
    "host.cores",
    "host.platform",
    "packages",
    "python",
    "git_revision",
)
"""The manifest fields of the measured run in the report's header
(`monitor.traces.MANIFEST_FIELDS`)."""


RUN_FIELDS = (
    *MEASURE_WINDOW,
    "total_rate",
    "workload.warmup_s",
    "workload.duration_s",
    "counts.published",
    "counts.delivered",
    "counts.lost",
    "host_load.disturbed",
    "host_load.phases",
)
"""The manifest fields read of every run of a report: its measurement window, its line
in the header and its host load."""


class ReportError(InputError):
    """The folder cannot be reported on (no manifest, no analysis, a file of either
    that cannot be read)."""


_SIMULATION_END = record(
    {"stop_reason": TEXT, "limit_s": AMOUNT, "max_relative_ci": or_null(AMOUNT)}
)


def _simulation_end(name: str, value: Any) -> str | None:
    """How a prediction's simulation ended (`simulation_rows`); a summary written
    before it was recorded has no ``stop_reason``, and nothing to check."""
    if isinstance(value, dict) and "stop_reason" not in value:
        return None
    return _SIMULATION_END(name, value)


SHOWN_METHODS = ("mm1", "sim")
"""The methods the report shows: the thesis' and the simulation (mm1-ps stays in the
Parquet)."""

SUMMARY_FIELDS = {  # `hop analyze`'s summary.json: what it could not read or reconcile
    "problems": Field(list_of(TEXT), optional=True),
    "warnings": Field(list_of(TEXT), optional=True),
    # what a brokers' trace folder's report says of its recording
    "window.start_ns": Field(NS),
    "window.end_ns": Field(NS),
    "used.events": Field(COUNT),
    "used.hops": Field(COUNT),
    "trace_files.hops": Field(COUNT),
}


PREDICTION_FIELDS = {  # `hop predict`'s predictions_summary.json (`monitor.predict`)
    "target_rates": Field(table_of(AMOUNT)),
    "same_as_run": Field(or_null(FLAG), optional=True),
    "target": Field(
        or_null(
            record(
                {
                    "workload": or_null(TEXT),
                    "scenario": or_null(TEXT),
                    "rate_scale": AMOUNT,
                    "measured_rates": FLAG,
                }
            )
        ),
        optional=True,
    ),
    "methods": Field(table_of(TABLE)),
    "methods.sim": Field(_simulation_end, optional=True),
    **{
        f"methods.{method}.{key}": Field(check, optional=True)
        for method in SHOWN_METHODS
        for key, check in (("saturated_hosts", list_of(TEXT)), ("bottleneck", TEXT))
    },
    "other_runs": Field(list_of(TEXT), optional=True),
}


VALIDATION_FIELDS = {  # `hop validate`'s validation.json (`monitor.validate`)
    "repetitions": Field(
        list_of(record({"calibrations": list_of(TEXT, least=1), "measurement": TEXT}), least=1)
    ),
    "set_aside": Field(list_of(TEXT), optional=True),
}


@dataclass
class Run:
    """One replay folder: its manifest and its analysis tables; or a brokers' trace
    folder, which has no manifest (empty) and no predictions."""

    path: Path
    manifest: dict[str, Any]
    tables: dict[str, pd.DataFrame]
    predictions: pd.DataFrame | None

    @classmethod
    def load(cls, path: Path) -> Run:
        if is_broker_trace_folder(path):
            raise ReportError(f"{path}: {BROKER_TRACES}")
        if not (path / "manifest.json").exists():
            raise ReportError(f"{path}: no manifest.json (not a replay folder)")
        manifest = read_manifest(path, HEADER)
        return cls(path, manifest, _analysis_tables(path), predictions_of(path))

    @classmethod
    def load_recording(cls, folder: Path) -> Run:
        """A brokers' trace folder (`is_broker_trace_folder`) and its analysis."""
        return cls(folder, {}, _analysis_tables(folder), None)

    def brokers(self) -> pd.DataFrame:
        """Per-broker totals over event types."""
        b = self.tables["brokers"].copy()
        b["broker"] = b["broker"].astype(str)
        grouped = b.groupby("broker", as_index=False).agg(
            throughput=("throughput", "sum"),
            utilization=("utilization", "sum"),
            cpu_mean_ns=("cpu_mean_ns", "mean"),
        )
        return grouped.sort_values("broker", key=lambda s: s.astype(int))

    def latency(self) -> pd.DataFrame:
        return self.tables["latency"]


def _analysis_tables(path: Path) -> dict[str, pd.DataFrame]:
    """`hop analyze`'s tables in PATH/analysis, each with the columns the report uses."""
    tables = {}
    for name, columns in TABLES.items():
        table_path = path / "analysis" / f"{name}.parquet"
        if not table_path.exists():
            raise ReportError(
                f"{table_path} is missing: run `hop analyze {path}` first (with --out DIR, "
                "report DIR instead)"
            )
        tables[name] = read_parquet(
            table_path, columns, ReportError, f"run `hop analyze {path}` again"
        )
    return tables


def analysis_summary(path: Path, fields: Sequence[str]) -> dict[str, Any] | None:
    """`hop analyze`'s PATH/analysis/summary.json, its `fields` (of `SUMMARY_FIELDS`)
    checked; None if there is none."""
    summary_path = path / "analysis" / "summary.json"
    if not summary_path.exists():
        return None
    return read_checked_json(
        summary_path, ReportError, "hop analyze writes it", SUMMARY_FIELDS, fields
    )


@dataclass
class Layout:
    """The runs a report covers: per repetition, the folder holding the prediction
    (its first calibration), the other calibrations, and the measurement."""

    calibrations: list[Path]
    others: list[list[Path]]
    measurements: list[Path]
    set_aside: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, run_dir: Path) -> Layout:
        record_path = run_dir / "validation.json"
        if record_path.exists():
            validation = read_checked_json(
                record_path,
                ReportError,
                "hop validate writes it",
                VALIDATION_FIELDS,
                VALIDATION_FIELDS,
            )
            reps = validation["repetitions"]
            return cls(
                [run_dir / r["calibrations"][0] for r in reps],
                [[run_dir / c for c in r["calibrations"][1:]] for r in reps],
                [run_dir / r["measurement"] for r in reps],
                validation.get("set_aside", []),
            )
        if (run_dir / "measurement").exists():
            calibration = run_dir / "calibration"
            return cls([calibration], [_other_runs(calibration)], [run_dir / "measurement"])
        return cls([run_dir], [[]], [run_dir])

    def labelled(self) -> list[tuple[str, Path]]:
        """Each run with its label for the report's header, in repetition order."""
        if self.calibrations == self.measurements:
            return [("run", self.measurements[0])]
        out = []
        for r, (first, others, measurement) in enumerate(
            zip(self.calibrations, self.others, self.measurements, strict=True), start=1
        ):
            suffix = "" if r == 1 else f" ({first.name})"
            out.append((f"calibration run{suffix}", first))
            out += [(f"also used: {o.name}", o) for o in others]
            suffix = "" if r == 1 else f" ({measurement.name})"
            out.append((f"measurement run{suffix}", measurement))
        return out


def trace_findings(layout: Layout) -> pd.DataFrame | None:
    """What `hop analyze` could not read (a trace file unreadable or cut short) or could
    not reconcile (visit ratios) in each run of the report, a row each, from the runs'
    analysis summaries; None when there is nothing to say."""
    rows = []
    for label, path in layout.labelled():
        summary = analysis_summary(path, ("problems", "warnings")) or {}
        rows += [(label, "problem", line) for line in summary.get("problems", [])]
        rows += [(label, "warning", line) for line in summary.get("warnings", [])]
    return pd.DataFrame(rows, columns=["run", "kind", "what"]) if rows else None


def prediction_summary(calibration: Path, fields: Sequence[str]) -> dict[str, Any] | None:
    """`hop predict`'s summary in ``calibration``, its `fields` (of `PREDICTION_FIELDS`,
    those the caller reads) checked; None where nothing was predicted."""
    path = calibration / "analysis" / "predictions_summary.json"
    if not path.exists():
        return None
    writer = "hop predict writes it"
    return read_checked_json(path, ReportError, writer, PREDICTION_FIELDS, fields)


def _other_runs(calibration: Path) -> list[Path]:
    summary = prediction_summary(calibration, ("other_runs",)) or {}
    return [Path(p) for p in summary.get("other_runs", [])]


def run_manifest(path: Path, fields: Sequence[str] = RUN_FIELDS) -> dict[str, Any]:
    """The manifest of a run of the report, the `fields` read from it checked."""
    return read_manifest(path, fields)


def other_load(layout: Layout) -> tuple[float, float] | None:
    """(events/s predicted for, events/s measured at) when a run's predictions are for
    another load than the measurement they would be compared with; None when they are
    for its load, or there are none.

    A single run: `hop predict RUN --scenario double`, say. `hop predict` records
    whether its target is the run's own load (``same_as_run``; for a summary written
    before it did, the nominal rates are compared). A `hop validate` folder: its
    calibration predicts the measurement's load from the rates it reached, scaled by
    the measurement's nominal rate over its own (`monitor.validate`); a target asked
    for otherwise (`hop predict` run again on the calibration) is another load. Both
    figures returned are nominal rates, but for a target from reached rates."""
    for calibration, measurement in zip(layout.calibrations, layout.measurements, strict=True):
        summary = prediction_summary(calibration, ("target_rates", "same_as_run", "target"))
        if summary is None:
            continue
        target = sum(summary["target_rates"].values())
        rate = float(run_manifest(measurement, ("total_rate",))["total_rate"])
        if calibration == measurement:
            same = summary.get("same_as_run")
            if same is None:
                same = _close(target, rate)
        else:
            asked = summary.get("target")  # None: written before it was recorded
            scale = rate / float(run_manifest(calibration, ("total_rate",))["total_rate"])
            same = asked is None or (
                asked["measured_rates"]
                and asked["workload"] is None
                and asked["scenario"] is None
                and _close(asked["rate_scale"], scale)
            )
        if not same:
            return target, rate
    return None


def saturation(layout: Layout) -> str | None:
    """The bottleneck broker when the model found the host's CPU saturated at the
    target load (by a method the report shows, in any repetition); None when it did
    not, or a summary does not say."""
    fields = [
        f"methods.{m}.{key}" for m in SHOWN_METHODS for key in ("saturated_hosts", "bottleneck")
    ]
    for calibration in layout.calibrations:
        summary = prediction_summary(calibration, fields)
        for method in SHOWN_METHODS:
            found = (summary or {}).get("methods", {}).get(method) or {}
            if found.get("saturated_hosts"):
                return str(found.get("bottleneck", "unknown"))
    return None


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-6 * max(abs(b), 1.0)


def predictions_of(run_dir: Path) -> pd.DataFrame | None:
    path = run_dir / "analysis" / "predictions.parquet"
    if not path.exists():
        return None
    return read_parquet(path, PREDICTED, ReportError, predict_again(run_dir))


def predict_again(run_dir: Path) -> str:
    return f"run `hop predict {run_dir}` again"
