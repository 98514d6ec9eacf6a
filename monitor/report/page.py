"""`render`: the report of a validation or replay folder (prediction beside
measurement), or of a brokers' trace folder (`recording`), written by `document`."""

from __future__ import annotations

from pathlib import Path

from monitor.report.comparison import compare, measurement_of
from monitor.report.document import write_page
from monitor.report.inputs import (
    SIMULATED,
    Layout,
    ReportError,
    Run,
    other_load,
    predict_again,
    predictions_of,
    run_manifest,
    saturation,
    trace_findings,
)
from monitor.report.recording import render_recording
from monitor.report.text import (
    TRACE_FINDINGS_TEXT,
    HostLoadSummary,
    Section,
    build_sections,
    header_rows,
    other_load_sentence,
    predictions_section,
    saturation_sentence,
    simulation_rows,
    summary_sentence,
)
from monitor.runfiles import read_parquet
from monitor.traces import is_broker_trace_folder


def render(run_dir: Path) -> tuple[Path, Path, str]:
    """Write report.html and report.md into `run_dir`; return them and the summary."""
    if is_broker_trace_folder(run_dir):
        return render_recording(run_dir)
    layout = Layout.of(run_dir)
    measured = Run.load(layout.measurements[0])
    # Every run's manifest and analysis summary are read (and checked) before anything
    # is computed from them: a file that cannot be used is named at once.
    labelled = [(label, path, run_manifest(path)) for label, path in layout.labelled()]
    findings = trace_findings(layout)
    predictions = [predictions_of(path) for path in layout.calibrations]
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
        read_parquet(sim_path, SIMULATED, ReportError, predict_again(layout.calibrations[0]))
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
    bottleneck = saturation(layout)
    if bottleneck is not None:
        sentence += saturation_sentence(bottleneck)
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
    return write_page(run_dir, title, sentence, header, sections)
