"""The report's words: the summary sentence, the header and the sections in order,
each a title, a text, a table or a figure."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from monitor.hostload import OTHER_CPU_LIMIT_CORES
from monitor.report.comparison import Comparison
from monitor.report.figures import (
    figure_latency_cdf,
    figure_routing_heatmap,
    figure_scatter,
    figure_service_times,
    figure_topology,
    figure_visit_ratios,
)
from monitor.report.inputs import SHOWN_METHODS, Layout, Run, prediction_summary

THESIS = {  # worst relative errors of the thesis' Tables 6.1/6.2 (its section 6.1.3)
    "throughput": {"s1": 1.95, "s2": 0.81},
    "latency": {"s1": 5.7, "s2": 12.7},
}


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
    ]
    return sections + characterization_sections(measured)


def characterization_sections(run: Run) -> list[Section]:
    """The run's routing and service times as the analysis found them: what every
    report shows of the folder it was made for."""
    return [
        Section(
            "Visit ratios",
            "Solved from the routing probabilities vs counted per "
            "publication (they agree when routing is a per-hop random process).",
            image=figure_visit_ratios(run),
        ),
        Section("Routing probabilities", image=figure_routing_heatmap(run)),
        Section(
            "Most frequent dissemination trees",
            table=run.tables["trees"].sort_values("events", ascending=False).head(12),
        ),
        Section(
            "Service times per broker",
            "CPU time spent routing one event.",
            image=figure_service_times(run),
        ),
    ]


TRACE_FINDINGS_TEXT = (
    "What the analysis of these runs could not read or reconcile. A problem is a trace "
    "file that could not be read, or was cut short: its missing rows are missing from "
    "every figure of this report. A warning is a class whose visit ratios, solved from "
    "the routing probabilities, differ from those counted in the traces: the model "
    "routes that class otherwise than the traces show."
)


def simulation_rows(layout: Layout) -> list[tuple[str, str]]:
    """Per repetition, how its simulation ended: converged, or stopped at its time limit
    and with what precision (so a reader can tell its sampling error from the model's),
    for the summaries that record it."""
    rows = []
    for r, calibration in enumerate(layout.calibrations, start=1):
        summary = prediction_summary(calibration, ("methods", "methods.sim"))
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


def saturation_sentence(bottleneck: str) -> str:
    return (
        f" At the predicted load the model finds the host's CPU saturated (bottleneck: "
        f"broker {bottleneck}): M/M/1 has no steady state there (its throughput is the "
        "offered load, its latencies are left blank), and the simulation's figures are "
        "those of an overloaded network, which grow the longer it runs."
    )


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
        shown = predictions[predictions["method"].isin(SHOWN_METHODS)]
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
