"""`render`: the report written as report.html (self-contained: figures inline,
styles inline, nothing fetched) and report.md with the same tables."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from monitor.errors import write_output
from monitor.report.comparison import compare, measurement_of
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
    write_output(html_path, page)
    write_output(md_path, "\n".join(md) + "\n")
    return html_path, md_path, sentence
