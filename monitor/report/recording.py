"""The report of a brokers' trace folder (`hop net --trace-dir`, analysed by `hop
analyze`): what the network did while it recorded, with nothing predicted and only the
brokers' part of the latency (no client recorded there)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd

from monitor.report.document import write_page
from monitor.report.inputs import ReportError, Run, analysis_summary
from monitor.report.text import Section, characterization_sections, percent_text

RECORDING = ("window.start_ns", "window.end_ns", "used.events", "used.hops", "trace_files.hops")
"""The summary fields the report reads, besides the problems and warnings."""

FINDINGS_TEXT = (
    "What the analysis could not read or reconcile. A problem is a trace file that could "
    "not be read, or was cut short: its missing rows are missing from every figure here. "
    "A warning names traces that do not add up (visit ratios solved from the routing "
    "probabilities that differ from those counted, event ids that repeat, several "
    "recordings in one folder)."
)


def render_recording(folder: Path) -> tuple[Path, Path, str]:
    """FOLDER/report.html and report.md; the files and the summary sentence."""
    run = Run.load_recording(folder)
    summary = analysis_summary(folder, ("problems", "warnings", *RECORDING))
    if summary is None:
        raise ReportError(
            f"{folder / 'analysis' / 'summary.json'} is missing: run `hop analyze {folder}`"
        )
    brokers = run.brokers()
    sentence = _sentence(run, summary, brokers)
    sections = [
        Section("Broker throughput", table=brokers),
        Section(
            "Latency through the brokers",
            "From an event's read at its home broker to the delivering broker's sends, per "
            "publisher and subscriber: the brokers' part of the delivery latency, without "
            "the two client links (no client recorded here).",
            table=run.latency(),
        ),
        *characterization_sections(run),
    ]
    findings = [("problem", line) for line in summary.get("problems", [])] + [
        ("warning", line) for line in summary.get("warnings", [])
    ]
    if findings:
        table = pd.DataFrame(findings, columns=["kind", "what"])
        sections.insert(0, Section("Trace problems", FINDINGS_TEXT, table=table))
        sentence += (
            f" The analysis could not read or reconcile every trace ({len(findings)} "
            "findings, listed in the report)."
        )
    title = f"hop trace report: {folder.resolve().name}"
    return write_page(folder, title, sentence, _header(folder, summary, brokers), sections)


def _sentence(run: Run, summary: dict[str, Any], brokers: pd.DataFrame) -> str:
    visits = run.tables["visit_ratios"]
    publishers = visits["publisher"].nunique()
    classes = len(visits[["event_type", "publisher"]].drop_duplicates())
    seconds = (summary["window"]["end_ns"] - summary["window"]["start_ns"]) / 1e9
    said = (
        f"The brokers recorded {summary['used']['events']} events from {publishers} "
        f"publisher(s) in {classes} class(es) over {seconds:.3g} s, routed by "
        f"{len(brokers)} broker(s)"
    )
    if len(brokers):
        busiest = brokers.loc[brokers["utilization"].idxmax()]
        said += (
            f"; the busiest, broker {busiest['broker']}, routed "
            f"{busiest['throughput']:.1f} events/s with "
            f"{percent_text(busiest['utilization'] * 100)} % of a core"
        )
    return said + (
        ". Nothing is predicted, and latency is the brokers' part only: no client recorded here."
    )


def _header(folder: Path, summary: dict[str, Any], brokers: pd.DataFrame) -> pd.DataFrame:
    window = summary["window"]

    def utc(ns: int) -> str:
        return datetime.fromtimestamp(ns / 1e9, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]

    rows = [
        ("folder", str(folder)),
        (
            "recorded",
            f"{utc(window['start_ns'])} to {utc(window['end_ns'])} UTC "
            f"({(window['end_ns'] - window['start_ns']) / 1e9:.3g} s: the first publication "
            "to the end of the last routing)",
        ),
        ("events", str(summary["used"]["events"])),
        ("hop rows", f"{summary['used']['hops']} in {summary['trace_files']['hops']} file(s)"),
        ("brokers", ", ".join(brokers["broker"])),
    ]
    return pd.DataFrame(rows, columns=["", "value"])
