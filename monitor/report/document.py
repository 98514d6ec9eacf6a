"""The report's two files from its parts: report.html (self-contained: figures inline,
styles inline, nothing fetched) and report.md with the same tables."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from monitor.errors import write_output
from monitor.report.text import Section


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


def write_page(
    folder: Path, title: str, sentence: str, header: pd.DataFrame, sections: list[Section]
) -> tuple[Path, Path, str]:
    """FOLDER/report.html and report.md of these parts; the files and the sentence."""
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
    html_path, md_path = folder / "report.html", folder / "report.md"
    write_output(html_path, page)
    write_output(md_path, "\n".join(md) + "\n")
    return html_path, md_path, sentence
