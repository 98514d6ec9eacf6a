"""`hop report`: prediction beside measurement, as the thesis' Tables 6.1 and 6.2.

Input is either a `hop validate` folder (``calibration/`` characterized at low load
and holding the predictions for the target workload, ``measurement/`` replayed
at the target workload, and with ``validation.json`` the further repetitions, whose
medians, intervals and spread `monitor.repeats` computes) or a single replay folder
(its characterization alone, and its own predictions if `hop predict` ran on it).
Output: ``report.html`` (self-contained: figures are inline PNGs, styles inline,
nothing fetched) and ``report.md`` with the same tables.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from monitor.errors import InputError
from monitor.hostload import OTHER_CPU_LIMIT_CORES
from monitor.measured import in_window
from monitor.repeats import inside, measured_summary, predicted_summary
from monitor.runfiles import (
    AMOUNT,
    FLAG,
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
from monitor.traces import MEASURE_WINDOW, read_manifest, read_table
from topologies import TopologyError, load_topology

THESIS = {  # worst relative errors of the thesis' Tables 6.1/6.2 (its section 6.1.3)
    "throughput": {"s1": 1.95, "s2": 0.81},
    "latency": {"s1": 5.7, "s2": 12.7},
}
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


SUMMARY_FIELDS = {  # `hop analyze`'s summary.json: what it could not read or reconcile
    "problems": Field(list_of(TEXT), optional=True),
    "warnings": Field(list_of(TEXT), optional=True),
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
    """One replay folder: its manifest and its analysis tables."""

    path: Path
    manifest: dict[str, Any]
    tables: dict[str, pd.DataFrame]
    predictions: pd.DataFrame | None

    @classmethod
    def load(cls, path: Path) -> Run:
        if not (path / "manifest.json").exists():
            raise ReportError(f"{path}: no manifest.json (not a replay folder)")
        manifest = read_manifest(path, HEADER)
        analysis = path / "analysis"
        tables = {}
        for name, columns in TABLES.items():
            table_path = analysis / f"{name}.parquet"
            if not table_path.exists():
                raise ReportError(f"{table_path} is missing: run `hop analyze {path}` first")
            tables[name] = read_parquet(
                table_path, columns, ReportError, f"run `hop analyze {path}` again"
            )
        return cls(path, manifest, tables, _predictions(path))

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
    # The report shows the thesis' method and the simulation; mm1-ps stays in the Parquet.
    methods = [m for m in ("mm1", "sim") if any(m in set(p["method"]) for p in predictions)]
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
    return sorted(best, key=_natural)[0]


def _natural(name: str) -> tuple[str, int]:
    digits = "".join(c for c in name if c.isdigit())
    return (name.rstrip("0123456789"), int(digits) if digits else 0)


# -- figures ------------------------------------------------------------------------------


def _figure(size: tuple[float, float]) -> tuple[Figure, Axes]:
    """A figure without pyplot (no global state, no GUI backend)."""
    fig = Figure(figsize=size)
    return fig, fig.subplots()


def _png(fig: Figure) -> str:
    """A figure as an inline `data:` URI (the page must work offline)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=96, bbox_inches="tight")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def figure_topology(run: Run) -> str:
    """The broker tree, each broker labelled with measured throughput and utilization."""
    parents = _parents(run)
    depth: dict[str, int] = {}
    for b in parents:
        d, p = 0, parents[b]
        while p is not None:
            d, p = d + 1, parents[p]
        depth[b] = d
    levels: dict[int, list[str]] = {}
    for b in sorted(parents, key=_natural):
        levels.setdefault(depth[b], []).append(b)
    pos = {}
    for d, names in levels.items():
        for i, b in enumerate(names):
            pos[b] = ((i + 0.5) / len(names), -d)
    metrics = run.brokers().set_index("broker")
    fig, ax = _figure((11, 1.6 * (len(levels) + 0.5)))
    for b, p in parents.items():
        if p is not None:
            ax.plot([pos[b][0], pos[p][0]], [pos[b][1], pos[p][1]], color="#888", zorder=1)
    for b, (x, y) in pos.items():
        label = f"broker {b}"
        if b in metrics.index:
            row = metrics.loc[b]
            label += f"\n{row['throughput']:.1f}/s\nU={row['utilization'] * 100:.1f}%"
        ax.text(
            x,
            y,
            label,
            ha="center",
            va="center",
            fontsize=8,
            zorder=2,
            bbox={"boxstyle": "round", "fc": "#eef4ff", "ec": "#3366aa"},
        )
    ax.set_xlim(-0.02, 1.02)
    ax.set_ylim(-len(levels) + 0.4, 0.6)
    ax.axis("off")
    return _png(fig)


def _parents(run: Run) -> dict[str, str | None]:
    try:
        topology = load_topology(run.path / "case_study.toml", files_needed=False)
    except TopologyError as exc:
        raise ReportError(str(exc)) from None
    return {
        str(b.id): (str(b.parent) if b.parent is not None else None)
        for b in topology.brokers.values()
    }


def figure_routing_heatmap(run: Run) -> str:
    """Routing probabilities over all classes: forwards i->j / arrivals at i."""
    rp = run.tables["routing_probabilities"]
    grouped = rp.groupby(["from_broker", "to_broker"], as_index=False)[
        ["forwarded", "arrived"]
    ].sum()
    names = sorted(set(grouped["from_broker"]) | set(grouped["to_broker"]), key=_natural)
    index = {b: i for i, b in enumerate(names)}
    matrix = np.full((len(names), len(names)), np.nan)
    for row in grouped.itertuples():
        matrix[index[row.from_broker], index[row.to_broker]] = row.forwarded / row.arrived
    fig, ax = _figure((6.5, 5.5))
    image = ax.imshow(matrix, cmap="viridis", vmin=0, vmax=1)
    ax.set_xticks(range(len(names)), names)
    ax.set_yticks(range(len(names)), names)
    ax.set_xlabel("to broker")
    ax.set_ylabel("from broker")
    fig.colorbar(image, ax=ax, label="routing probability (all classes)")
    return _png(fig)


def figure_visit_ratios(run: Run) -> str:
    v = run.tables["visit_ratios"]
    fig, ax = _figure((5, 4.5))
    ax.scatter(v["visit_ratio_counted"], v["visit_ratio_solved"], s=12)
    top = max(1.0, float(v[["visit_ratio_counted", "visit_ratio_solved"]].max().max()))
    ax.plot([0, top], [0, top], color="#c33", lw=1, label="y = x")
    ax.set_xlabel("visit ratio counted (visits / publications)")
    ax.set_ylabel("visit ratio solved (V = e + V nu)")
    ax.legend()
    return _png(fig)


def figure_service_times(run: Run) -> str:
    """CPU per event at each broker (from the hop traces)."""
    hops = read_table(run.path, "hops").table.select(["broker", "cpu_ns"]).to_pandas()
    names = sorted(hops["broker"].unique(), key=_natural)
    data = [hops.loc[hops["broker"] == b, "cpu_ns"].to_numpy() / 1e3 for b in names]
    fig, ax = _figure((10, 4))
    ax.boxplot(data, tick_labels=names, showfliers=False)
    ax.set_xlabel("broker")
    ax.set_ylabel("CPU per event (us)")
    return _png(fig)


def figure_latency_cdf(measured: Run, simulated: pd.DataFrame | None) -> str:
    d = read_table(measured.path, "deliveries").table.to_pandas()
    lat = np.sort((d["t_deliver_ns"] - d["t_publish_ns"]).to_numpy() / 1e6)
    fig, ax = _figure((6.5, 4))
    ax.plot(lat, np.linspace(0, 1, len(lat)), label="measured")
    if simulated is not None and len(simulated):
        sim = np.sort(simulated["latency_ms"].to_numpy())
        ax.plot(sim, np.linspace(0, 1, len(sim)), label="simulated", ls="--")
    ax.set_xlabel("delivery latency (ms)")
    ax.set_ylabel("fraction of deliveries")
    ax.set_xlim(0, np.percentile(lat, 99.5) * 1.2 if len(lat) else 1)
    ax.legend()
    return _png(fig)


def figure_scatter(comparison: Comparison) -> str:
    lat = comparison.latency
    fig, ax = _figure((5, 4.5))
    top = float(lat["measured"].max()) if len(lat) else 1.0
    for method in ("mm1", "sim"):
        if method in lat:
            ax.scatter(lat["measured"], lat[method], s=14, label=method)
            top = max(top, float(lat[method].max()))
    ax.plot([0, top], [0, top], color="#c33", lw=1, label="y = x")
    ax.set_xlabel("measured mean latency (ms)")
    ax.set_ylabel("predicted mean latency (ms)")
    ax.legend()
    return _png(fig)


# -- rendering ----------------------------------------------------------------------------


def _fmt(value: Any) -> str:
    if isinstance(value, float | np.floating):
        return "" if np.isnan(value) else f"{value:.2f}"
    return str(value)


def _html_table(frame: pd.DataFrame) -> str:
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in frame.columns)
    rows = "".join(
        "<tr>" + "".join(f"<td>{html.escape(_fmt(v))}</td>" for v in row) + "</tr>"
        for row in frame.itertuples(index=False)
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"


def _md_table(frame: pd.DataFrame) -> str:
    lines = ["| " + " | ".join(str(c) for c in frame.columns) + " |"]
    lines.append("|" + "---|" * len(frame.columns))
    for row in frame.itertuples(index=False):
        lines.append("| " + " | ".join(_fmt(v) for v in row) + " |")
    return "\n".join(lines)


UNITS = {"throughput": "brokers", "latency": "pairs"}


NO_ERROR_BELOW = 1e-3
"""Errors and spreads under this many percent are printed as 0.0: rounding in the
arithmetic (an unsaturated M/M/1 throughput is the measured arrival rate itself, so
its "error" is a few 1e-9 %), not a difference a run could show."""


def percent_text(value: float) -> str:
    """A percentage to one decimal, or to two significant digits below 0.1: a spread
    of 0.03 % printed as "0.0" would read as none, beside errors that exceed it. Under
    `NO_ERROR_BELOW`, 0.0."""
    if abs(value) < NO_ERROR_BELOW:
        return "0.0"
    if abs(value) >= 0.1:
        return f"{value:.1f}"
    return f"{value:.2g}"


def summary_sentence(
    comparison: Comparison | None, scenario: str | None, load: HostLoadSummary | None = None
) -> str:
    """The errors, and beside them the measurement's own run-to-run spread: figures
    side by side, never a verdict on the model (one measurement cannot carry one)."""
    if comparison is None or not comparison.summary:
        return "Characterization only: no predictions to compare with."
    s = comparison.summary
    parts = []
    for name in ("throughput", "latency"):
        for method in ("sim", "mm1"):
            key = f"{name}_{method}"
            if f"{key}_worst" not in s:
                continue
            text = (
                f"{name} ({method}) mean error {percent_text(s[f'{key}_mean'])} %, "
                f"worst {percent_text(s[f'{key}_worst'])} %"
            )
            if f"{key}_within_spread" in s and s[f"{key}_spread_mean"] == 0:
                text += ", every measurement the same (no run-to-run spread to compare with)"
            elif f"{key}_within_spread" in s:
                rows, unit = int(s[f"{key}_rows"]), UNITS[name]
                text += (
                    f", within the measurement's own run-to-run spread (mean "
                    f"{percent_text(s[f'{key}_spread_mean'])} %) for "
                    f"{int(s[f'{key}_within_spread'])} "
                    f"of {rows} {unit}, inside its 95 % interval for "
                    f"{int(s[f'{key}_inside'])} of {rows}"
                )
            parts.append(text)
    n = comparison.repetitions
    if n > 1:
        head = f"Prediction vs measurement, medians of {n} interleaved repetitions: "
        tail = ""
    else:
        head = "Prediction vs measurement: "
        tail = (
            " One measurement: its run-to-run spread is unknown, and a single run can "
            "neither confirm nor refute the model (hop validate --repeats 3)."
        )
    thesis = ""
    if scenario in ("s1", "s2"):
        thesis = (
            f" The thesis' worst errors for {scenario}: throughput "
            f"{THESIS['throughput'][scenario]} %, latency {THESIS['latency'][scenario]} %."
        )
    quiet = "" if load is None else " " + load.sentence()
    return head + "; ".join(parts) + "." + tail + quiet + thesis


@dataclass
class HostLoadSummary:
    """Other processes' load on the host during each replay of a report (`host_load`
    of the manifests; runs recorded before it was recorded are left out)."""

    table: pd.DataFrame
    set_aside: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, runs: Sequence[tuple[str, dict[str, Any]]], set_aside: Sequence[str] = ()):
        rows = []
        for name, manifest in runs:
            load = manifest.get("host_load")
            if not load:
                continue
            phases = load.get("phases") or {}

            def cores(phase: str, key: str, phases: dict[str, Any] = phases) -> float:
                return (phases.get(phase) or {}).get(key, np.nan)

            verdict = load.get("disturbed")
            rows.append(
                {
                    "run": name,
                    "others, warm-up (cores)": cores("warmup", "other_cores"),
                    "others, measurement (cores)": cores("measure", "other_cores"),
                    "of which steal (cores)": cores("measure", "steal_cores"),
                    "run itself, measurement (cores)": cores("measure", "run_cores"),
                    "disturbed": {True: "DISTURBED", False: "quiet", None: "not judged"}[verdict],
                }
            )
        return cls(pd.DataFrame(rows), list(set_aside)) if rows else None

    def disturbed(self) -> list[str]:
        return list(self.table.loc[self.table["disturbed"] == "DISTURBED", "run"])

    def sentence(self) -> str:
        bad, n = self.disturbed(), len(self.table)
        aside = (
            f" ({len(self.set_aside)} disturbed replays were set aside and run again)"
            if self.set_aside
            else ""
        )
        if not bad:
            return (
                f"Other processes used at most {OTHER_CPU_LIMIT_CORES:g} cores of the host in "
                f"every replay{aside}."
            )
        rows = self.table[self.table["run"].isin(bad)]
        phases = rows[["others, warm-up (cores)", "others, measurement (cores)"]]
        return (
            f"The host was NOT quiet: in {len(bad)} of {n} replays ({', '.join(bad)}) other "
            f"processes used more than {OTHER_CPU_LIMIT_CORES:g} cores (up to "
            f"{np.nanmax(phases.to_numpy()):.2f} cores in a phase, "
            f"{np.nanmean(rows['others, measurement (cores)']):.2f} on average in those "
            f"replays' measurement windows){aside}; their figures are disturbed."
        )


@dataclass
class Section:
    title: str
    text: str = ""
    table: pd.DataFrame | None = None
    image: str | None = None


MEASURED_TEXT = (
    " With repetitions, 'measured' is the median over the measurement replays, "
    "meas_ci_low/high a bootstrap 95 % interval of it, and spread_% how far the furthest "
    "repetition lay from the median; each method's value is the median of the "
    "repetitions' predictions, its interval the envelope of their intervals (the "
    "calibrations' spread and the simulation's sampling error), and *_in_meas_ci says "
    "whether the prediction lies inside the measurement's interval."
)


def build_sections(
    measured: Run,
    comparison: Comparison | None,
    simulated: pd.DataFrame | None,
    load: HostLoadSummary | None = None,
) -> list[Section]:
    sections = [
        Section(
            "Topology",
            "Measured throughput (events/s) and utilization (CPU of routing) per broker.",
            image=figure_topology(measured),
        )
    ]
    if load is not None:
        sections.append(
            Section(
                "Other load on the host",
                "Cores used on average by processes outside each replay (the host's busy "
                "CPU from /proc/stat minus the replay's own processes), and of these the "
                "time the hypervisor gave the cores to other machines (steal; blank where "
                "the replay did not record it); a replay is marked disturbed above "
                f"{OTHER_CPU_LIMIT_CORES:g} cores in its warm-up or measurement."
                + (
                    f" Set aside and run again: {', '.join(load.set_aside)}."
                    if load.set_aside
                    else ""
                ),
                table=load.table,
            )
        )
    if comparison is not None:
        several = comparison.repetitions > 1
        extra = MEASURED_TEXT if several else ""
        sections.append(
            Section(
                "Broker throughput (Table 6.1 form)",
                "Events per second handled by each broker: predicted from the calibration run "
                "beside measured in the measurement run, and the relative error." + extra,
                table=comparison.throughput,
            )
        )
        chosen = comparison.chosen_subscriber
        lat = comparison.latency
        sections.append(
            Section(
                f"Delivery latency to {chosen} (Table 6.2 form)",
                "Mean delivery latency (ms) from each publisher to one subscriber; "
                + (
                    "prediction intervals cover the calibrations' spread and the "
                    "simulation's sampling error."
                    if several
                    else "simulation results with their 95 % confidence intervals (the "
                    "simulation's sampling error only)."
                ),
                table=lat[lat["subscriber"] == chosen].drop(columns=["entity"]),
            )
        )
        sections.append(
            Section(
                "Delivery latency, every publisher and subscriber",
                "The full matrix, one row per (publisher, subscriber) pair." + extra,
                table=lat.drop(columns=["entity"]),
            )
        )
        sections.append(Section("Predicted vs measured latency", image=figure_scatter(comparison)))
    else:
        sections.append(Section("Broker throughput", table=measured.brokers()))
        sections.append(Section("Delivery latency", table=measured.latency()))
    sections += [
        Section(
            "Latency distribution",
            "Measured delivery latencies, and simulated ones when a simulation ran.",
            image=figure_latency_cdf(measured, simulated),
        ),
        Section(
            "Visit ratios",
            "Solved from the routing probabilities vs counted per "
            "publication (they agree when routing is a per-hop random process).",
            image=figure_visit_ratios(measured),
        ),
        Section("Routing probabilities", image=figure_routing_heatmap(measured)),
        Section(
            "Most frequent dissemination trees",
            table=measured.tables["trees"].sort_values("events", ascending=False).head(12),
        ),
        Section(
            "Service times per broker",
            "CPU time spent routing one event.",
            image=figure_service_times(measured),
        ),
    ]
    return sections


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
        summary_path = path / "analysis" / "summary.json"
        if summary_path.exists():
            summary = read_checked_json(
                summary_path, ReportError, "hop analyze writes it", SUMMARY_FIELDS, SUMMARY_FIELDS
            )
            rows += [(label, "problem", line) for line in summary.get("problems", [])]
            rows += [(label, "warning", line) for line in summary.get("warnings", [])]
    return pd.DataFrame(rows, columns=["run", "kind", "what"]) if rows else None


TRACE_FINDINGS_TEXT = (
    "What the analysis of these runs could not read or reconcile. A problem is a trace "
    "file that could not be read, or was cut short: its missing rows are missing from "
    "every figure of this report. A warning is a class whose visit ratios, solved from "
    "the routing probabilities, differ from those counted in the traces: the model "
    "routes that class otherwise than the traces show."
)


def _prediction_summary(calibration: Path, fields: Sequence[str]) -> dict[str, Any] | None:
    """`hop predict`'s summary in ``calibration``, its `fields` (of `PREDICTION_FIELDS`,
    those the caller reads) checked; None where nothing was predicted."""
    path = calibration / "analysis" / "predictions_summary.json"
    if not path.exists():
        return None
    writer = "hop predict writes it"
    return read_checked_json(path, ReportError, writer, PREDICTION_FIELDS, fields)


def _other_runs(calibration: Path) -> list[Path]:
    summary = _prediction_summary(calibration, ("other_runs",)) or {}
    return [Path(p) for p in summary.get("other_runs", [])]


def _manifest(path: Path, fields: Sequence[str] = RUN_FIELDS) -> dict[str, Any]:
    """The manifest of a run of the report, the `fields` read from it checked."""
    return read_manifest(path, fields)


def simulation_rows(layout: Layout) -> list[tuple[str, str]]:
    """Per repetition, how its simulation ended: converged, or stopped at its time limit
    and with what precision (so a reader can tell its sampling error from the model's),
    for the summaries that record it."""
    rows = []
    for r, calibration in enumerate(layout.calibrations, start=1):
        summary = _prediction_summary(calibration, ("methods", "methods.sim"))
        sim = summary["methods"].get("sim", {}) if summary is not None else {}
        if "stop_reason" not in sim:
            continue
        widest = sim["max_relative_ci"]
        precision = (
            "no interval for some figures: too short a run (hop predict --sim-seconds)"
            if widest is None
            else f"widest 95 % interval +/-{widest * 100:.1f} % of its value"
        )
        how = {
            "precision": "converged",
            "max_wall_s": f"stopped at its {sim['limit_s']:g} s limit",
        }.get(sim["stop_reason"], f"stopped ({sim['stop_reason']})")
        label = "simulation" if r == 1 else f"simulation ({calibration.name})"
        rows.append((label, f"{how}; {precision}"))
    return rows


def header_rows(
    measured: Run,
    runs: Sequence[tuple[str, dict[str, Any]]],
    simulations: Sequence[tuple[str, str]] = (),
) -> pd.DataFrame:
    m = measured.manifest
    rows = [
        ("case study", m["case_study"]["name"]),
        ("scenario", m.get("scenario") or "base"),
        ("routing", m["case_study"]["routing"]),
        ("host", f"{m['host']['name']} ({m['host']['cores']} cores, {m['host']['platform']})"),
        (
            "versions",
            ", ".join(f"{k} {v}" for k, v in m["packages"].items()) + f", Python {m['python']}",
        ),
        ("git revision", m.get("git_revision") or "-"),
    ]
    for label, manifest in runs:
        c, w = manifest["counts"], manifest["workload"]
        load = manifest.get("host_load") or {}
        mark = " - DISTURBED by other load on the host" if load.get("disturbed") else ""
        rows.append(
            (
                label,
                f"{manifest['total_rate']:.1f} events/s, {w['warmup_s']:.3g} s warm-up + "
                f"{w['duration_s']:.3g} s measured; published {c['published']}, delivered "
                f"{c['delivered']}, lost {c['lost']}{mark}",
            )
        )
    rows += simulations
    return pd.DataFrame(rows, columns=["", "value"])


CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
h1 { font-size: 1.6em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; margin: 0.5em 0; font-size: 0.85em; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: right; }
th { background: #f0f3f8; } td:first-child, th:first-child { text-align: left; }
.summary { background: #fffbe6; border: 1px solid #e6d58a; padding: 0.8em; }
img { max-width: 100%; }
"""


def render(run_dir: Path) -> tuple[Path, Path, str]:
    """Write report.html and report.md into `run_dir`; return them and the summary."""
    layout = Layout.of(run_dir)
    measured = Run.load(layout.measurements[0])
    # Every run's manifest and analysis summary are read (and checked) before anything
    # is computed from them: a file that cannot be used is named at once.
    labelled = [(label, path, _manifest(path)) for label, path in layout.labelled()]
    findings = trace_findings(layout)
    predictions = [_predictions(path) for path in layout.calibrations]
    elsewhere = other_load(layout)
    comparison = None
    if all(p is not None for p in predictions) and elsewhere is None:
        comparison = compare(
            [p for p in predictions if p is not None],
            [measurement_of(path) for path in layout.measurements],
            measured.latency(),
        )
    sim_path = layout.calibrations[0] / "analysis" / "simulated_latency.parquet"
    simulated = (
        read_parquet(sim_path, SIMULATED, ReportError, _predict_again(layout.calibrations[0]))
        if sim_path.exists()
        else None
    )
    scenario = measured.manifest.get("scenario")
    runs = [(label, manifest) for label, _, manifest in labelled]
    load = HostLoadSummary.of(
        [(path.name, manifest) for _, path, manifest in labelled], layout.set_aside
    )
    if elsewhere is None:
        sentence = summary_sentence(comparison, scenario, load)
        sections = build_sections(measured, comparison, simulated, load)
    else:  # neither errors nor a simulation beside a measurement of another load
        sentence = other_load_sentence(*elsewhere)
        sections = build_sections(measured, None, None, load)
        sections.insert(1, predictions_section(predictions[0], elsewhere[0]))
    if findings is not None:
        sentence += (
            f" The analysis could not read or reconcile every trace ({len(findings)} "
            "findings, listed in the report)."
        )
        sections.insert(0, Section("Trace problems", TRACE_FINDINGS_TEXT, table=findings))
    header = header_rows(measured, runs, simulation_rows(layout))
    title = (
        f"hop validation report: {measured.manifest['case_study']['name']} ({scenario or 'base'})"
    )

    body = [
        f"<h1>{html.escape(title)}</h1>",
        f"<p class='summary'>{html.escape(sentence)}</p>",
        _html_table(header),
    ]
    md = [f"# {title}", "", sentence, "", _md_table(header), ""]
    for section in sections:
        body.append(f"<h2>{html.escape(section.title)}</h2>")
        md += [f"## {section.title}", ""]
        if section.text:
            body.append(f"<p>{html.escape(section.text)}</p>")
            md += [section.text, ""]
        if section.table is not None:
            body.append(_html_table(section.table))
            md += [_md_table(section.table), ""]
        if section.image is not None:
            body.append(f"<img alt='{html.escape(section.title)}' src='{section.image}'>")
            md += ["(figure in report.html)", ""]
    page = (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title><style>{CSS}</style></head>"
        f"<body>{''.join(body)}</body></html>"
    )
    html_path, md_path = run_dir / "report.html", run_dir / "report.md"
    html_path.write_text(page)
    md_path.write_text("\n".join(md) + "\n")
    return html_path, md_path, sentence


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
        summary = _prediction_summary(calibration, ("target_rates", "same_as_run", "target"))
        if summary is None:
            continue
        target = sum(summary["target_rates"].values())
        rate = float(_manifest(measurement, ("total_rate",))["total_rate"])
        if calibration == measurement:
            same = summary.get("same_as_run")
            if same is None:
                same = _close(target, rate)
        else:
            asked = summary.get("target")  # None: written before it was recorded
            scale = rate / float(_manifest(calibration, ("total_rate",))["total_rate"])
            same = asked is None or (
                asked["measured_rates"]
                and asked["workload"] is None
                and asked["scenario"] is None
                and _close(asked["rate_scale"], scale)
            )
        if not same:
            return target, rate
    return None


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-6 * max(abs(b), 1.0)


def other_load_sentence(target: float, rate: float) -> str:
    return (
        f"Predictions for {target:.1f} events/s beside a run measured at {rate:.1f} events/s: "
        "a prediction at another load, shown without errors, as no measurement at that load "
        "is here to compare it with (hop validate measures the load it predicts)."
    )


def predictions_section(predictions: pd.DataFrame | None, target: float) -> Section:
    """The predicted throughput per broker and latency per pair, for a target load
    that was not measured."""
    rows = []
    if predictions is not None:
        shown = predictions[predictions["method"].isin(["mm1", "sim"])]
        for kind, metric, name in (
            ("broker", "throughput", "throughput (events/s)"),
            ("pair", "latency_ms", "mean latency (ms)"),
        ):
            picked = shown[(shown["kind"] == kind) & (shown["metric"] == metric)]
            table = picked.pivot(index="entity", columns="method", values="predicted")
            if kind == "broker":  # 1, 2, ..., 10, not 1, 10, 2
                table = table.sort_index(key=lambda ids: ids.astype(int))
            for entity, values in table.iterrows():
                rows.append({"kind": kind, "entity": entity, "predicted": name, **values})
    return Section(
        f"Predictions at {target:.1f} events/s",
        "Predicted throughput per broker and mean delivery latency per publisher and "
        "subscriber pair, by the thesis' method (mm1) and the simulation (sim).",
        table=pd.DataFrame(rows),
    )


def _predictions(run_dir: Path) -> pd.DataFrame | None:
    path = run_dir / "analysis" / "predictions.parquet"
    if not path.exists():
        return None
    return read_parquet(path, PREDICTED, ReportError, _predict_again(run_dir))


def _predict_again(run_dir: Path) -> str:
    return f"run `hop predict {run_dir}` again"
