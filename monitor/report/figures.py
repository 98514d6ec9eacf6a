"""The report's figures, each an inline PNG (`data:` URI): the page must work offline."""

from __future__ import annotations

import base64
import io

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from monitor.report.comparison import Comparison, natural_order
from monitor.report.inputs import SHOWN_METHODS, ReportError, Run
from monitor.traces import read_table
from topologies import TopologyError, load_topology


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
    for b in sorted(parents, key=natural_order):
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
    """Routing probabilities over all classes: forwards i->j / arrivals at i. Every
    broker of a replay's network has its row and column, blank where nothing was
    forwarded (a run whose events crossed no link has only blanks); a brokers' trace
    folder, without the network's file, shows the brokers that forwarded or received."""
    rp = run.tables["routing_probabilities"]
    grouped = rp.groupby(["from_broker", "to_broker"], as_index=False)[
        ["forwarded", "arrived"]
    ].sum()
    network = set(_parents(run)) if run.manifest else set()  # (a trace folder has no file)
    brokers = network | set(grouped["from_broker"]) | set(grouped["to_broker"])
    names = sorted(brokers, key=natural_order)
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
    names = sorted(hops["broker"].unique(), key=natural_order)
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
    for method in SHOWN_METHODS:
        if method in lat:
            ax.scatter(lat["measured"], lat[method], s=14, label=method)
            top = max(top, float(lat[method].max()))
    ax.plot([0, top], [0, top], color="#c33", lw=1, label="y = x")
    ax.set_xlabel("measured mean latency (ms)")
    ax.set_ylabel("predicted mean latency (ms)")
    ax.legend()
    return _png(fig)
